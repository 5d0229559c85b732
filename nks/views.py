from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def cluster_list(request: HttpRequest) -> HttpResponse:
    return render(request, "nks/cluster_list.html")
