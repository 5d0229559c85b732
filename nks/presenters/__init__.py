"""What each NKS page shows, one module per page; queries live in nks/queries.py.

Presenters return rows of domain values (Health, OperationPhase, ResizeState...) and text;
the colour of a state is chosen in the templates (nks/templatetags/nks_classes.py).

- clusters: the clusters page; overview: the overview's NKS region
- cluster_detail, nodegroup_detail, resize_detail, resize_audit: the other pages
- api: the JSON API's bodies
- rows, resizes, timeline, common: what several pages show alike
"""
