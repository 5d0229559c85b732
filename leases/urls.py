from django.urls import path

from leases import node_views, views

app_name = "leases"
urlpatterns = [
    path("", views.lease_list, name="index"),
    path("clusters/", views.cluster_list, name="clusters"),
    path("clusters/<str:cluster>/nodes/<str:name>/", node_views.node_page, name="node"),
    path("<str:cluster>/<str:namespace>/<str:name>/", views.lease_page, name="detail"),
]
