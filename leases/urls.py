from django.urls import path

from leases import views

app_name = "leases"
urlpatterns = [
    path("", views.lease_list, name="index"),
    path("clusters/", views.cluster_list, name="clusters"),
    path("<str:cluster>/<str:namespace>/<str:name>/", views.lease_page, name="detail"),
]
