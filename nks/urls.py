from django.urls import path

from nks import views

app_name = "nks"
urlpatterns = [
    path("", views.cluster_list, name="index"),
]
