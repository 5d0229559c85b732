from django.urls import path

from alerts import views

app_name = "alerts"
urlpatterns = [
    path("", views.incident_list, name="index"),
    path("subscription/", views.subscription, name="subscription"),
    path(
        "subscription/confirm/<str:token>/",
        views.confirm_subscription,
        name="confirm_subscription",
    ),
    path("<int:incident_id>/", views.incident_page, name="incident"),
    path("<int:incident_id>/acknowledge/", views.acknowledge, name="acknowledge"),
    path("<int:incident_id>/unacknowledge/", views.unacknowledge, name="unacknowledge"),
    path("<int:incident_id>/silence/", views.silence, name="silence"),
    path("<int:incident_id>/unsilence/", views.unsilence, name="unsilence"),
]
