"""NKS routes of the JSON API, included under /api/v1/nks/ (URL names in the `api` namespace)."""

from django.urls import path

from nks import api

urlpatterns = [
    path("clusters", api.cluster_list, name="nks_clusters"),
    path("clusters/<str:uuid>/nodegroups/<str:name>/resize", api.resize, name="nks_resize"),
    path("resize-requests/<int:pk>", api.resize_request, name="nks_resize_request"),
]
