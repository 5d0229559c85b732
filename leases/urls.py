from django.urls import path

from leases import views

app_name = "leases"
urlpatterns = [
    path("", views.lease_list, name="index"),
]
