"""NKS routes of the JSON API, included under /api/v1/nks/ (URL names in the `api` namespace)."""

from django.urls import path

import nks.converters  # noqa: F401 (registers `nks`: segments that carry any NKS uuid or name)
from nks import api

urlpatterns = [
    path("clusters", api.cluster_list, name="nks_clusters"),
    path("clusters/<nks:uuid>/nodegroups/<nks:name>/resize", api.resize, name="nks_resize"),
    path("resize-requests/<int:pk>", api.resize_request, name="nks_resize_request"),
]
