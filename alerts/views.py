from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def incident_list(request: HttpRequest) -> HttpResponse:
    return render(request, "alerts/incident_list.html")
