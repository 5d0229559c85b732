from django.contrib import admin
from django.urls import include, path

from alerts import api as alerts_api
from dashboard import oidc, views
from leases import api as leases_api
from leases import group_api

api_v1 = [
    path("me", views.api_me, name="me"),
    path("leases", leases_api.lease_list, name="leases"),
    path(
        "leases/<str:cluster>/<str:namespace>/<str:name>",
        leases_api.lease_detail,
        name="lease",
    ),
    path("leader-groups", group_api.group_list, name="leader_groups"),
    path("nks/", include("nks.api_urls")),
    path("alerts", alerts_api.incident_list, name="alerts"),
]

urlpatterns = [
    path("", views.overview, name="overview"),
    path("login/", oidc.LoginView.as_view(), name="login"),
    path("language/", views.set_language, name="set_language"),
    path("preferences/", views.preferences, name="preferences"),
    path("preferences/time-zone-offer/", views.time_zone_offer, name="time_zone_offer"),
    # Single sign-on: /oidc/authenticate/ starts it, the provider returns to /oidc/callback/.
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("leases/", include("leases.urls")),
    path("clusters/", include("nks.urls")),
    path("alerts/", include("alerts.urls")),
    path("api/v1/", include((api_v1, "api"))),
]

handler500 = "dashboard.views.server_error"
