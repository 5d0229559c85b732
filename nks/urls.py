from django.urls import path

import nks.converters  # noqa: F401 (registers `nks`: segments that carry any NKS uuid or name)
from nks import views

app_name = "nks"
urlpatterns = [
    path("", views.cluster_list, name="index"),
    path("resizes/", views.resize_list, name="resize_list"),
    path("resizes/<int:pk>/", views.resize_page, name="resize_detail"),
    path("<nks:uuid>/", views.cluster_page, name="cluster"),
    path("<nks:uuid>/watch-leases/", views.watch_leases, name="watch_leases"),
    path("<nks:uuid>/nodegroups/<nks:name>/", views.nodegroup_page, name="nodegroup"),
    path("<nks:uuid>/nodegroups/<nks:name>/resize/", views.resize, name="resize"),
]
