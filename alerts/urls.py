from django.urls import path

from alerts import views

app_name = "alerts"
urlpatterns = [
    path("", views.incident_list, name="index"),
]
