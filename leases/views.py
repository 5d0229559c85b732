from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def lease_list(request: HttpRequest) -> HttpResponse:
    return render(request, "leases/lease_list.html")
