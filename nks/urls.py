from django.urls import path

from nks import views

app_name = "nks"
urlpatterns = [
    path("", views.cluster_list, name="index"),
    path("resizes/", views.resize_list, name="resize_list"),
    path("resizes/<int:pk>/", views.resize_page, name="resize_detail"),
    path("<str:uuid>/", views.cluster_page, name="cluster"),
    path("<str:uuid>/watch-leases/", views.watch_leases, name="watch_leases"),
    path("<str:uuid>/nodegroups/<str:name>/", views.nodegroup_page, name="nodegroup"),
    path("<str:uuid>/nodegroups/<str:name>/resize/", views.resize, name="resize"),
]
