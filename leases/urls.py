from django.urls import path

from leases import group_views, node_views, views

app_name = "leases"
urlpatterns = [
    path("", views.lease_list, name="index"),
    path("clusters/", views.cluster_list, name="clusters"),
    path("clusters/<str:cluster>/nodes/<str:name>/", node_views.node_page, name="node"),
    path("groups/", group_views.group_list, name="groups"),
    path(
        "clusters/<str:cluster>/groups/<str:namespace>/<str:name>/",
        group_views.group_page,
        name="group",
    ),
    path(
        "clusters/<str:cluster>/groups/<str:namespace>/<str:name>/expected-size/",
        group_views.group_expected_size,
        name="group_expected_size",
    ),
    path("<str:cluster>/<str:namespace>/<str:name>/", views.lease_page, name="detail"),
]
