"""What each Leases page shows: one module per page, each returning plain dataclasses.

Presenters read through leases.queries and leases.flapping and turn rows into the values a
template prints; how a value looks (which CSS class a state gets) is the templates' business
(leases/templatetags/lease_css.py).
"""
