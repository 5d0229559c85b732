"""Where a kubeconfig that NKS hands out may send the dashboard's watchers.

The "Watch this cluster" button stores the kubeconfig NKS answers with, and a watcher then
connects to whatever `server` it names, sends NKS's credentials there and reports what it
answered. Unchecked, an NKS answer (or whoever forges one) could point the watchers at the
workers' loopback, the cloud's metadata service (169.254.169.254) or the private network, and
read the answers, or at least which ports answer, off the watchers page. So a kubeconfig from
NKS must:

- use https (NKS_KUBECONFIG_ALLOW_HTTP lets a test setup use http);
- name the host and port NKS reports as the cluster's API address (`api_address`);
- reach only public addresses: never loopback, link-local, multicast, unspecified or other
  non-routable ones, and private ones only where the operator allows
  (NKS_KUBECONFIG_ALLOW_PRIVATE, which may also allow loopback for the demo).

The literal is checked when the kubeconfig is stored (`server_problems`); at every connection
(`pin_server`, called by leases.kube.connect) the name is resolved, every address is checked,
and the client is pinned to a checked address, so DNS cannot answer one address to the check
and another to the connection. A kubeconfig an operator supplies is not checked here: its host
is the operator's choice. Pure: no models (leases.kube imports it).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.translation import gettext

from leases.kubeconfig import KubeconfigRefused, entry_label

logger = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_DEFAULT_PORTS = {"https": 443, "http": 80}


class EgressRefused(KubeconfigRefused):
    """An NKS-sourced kubeconfig names a server the watchers may not reach; says which rule."""


def _endpoint(url: str) -> tuple[str, str, int] | None:
    """(scheme, host in lower case, port) of a URL, or None when it is not one."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return parts.scheme, parts.hostname.lower().rstrip("."), port


def _address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def address_problem(address: IPAddress) -> str | None:
    """Which rule an address breaks, in words ("a loopback address"), or None if allowed."""
    mapped = getattr(address, "ipv4_mapped", None)
    address = mapped or address  # ::ffff:127.0.0.1 is 127.0.0.1
    # An explicit allowance of the operator's wins, loopback included (the demo's fake).
    for network in settings.NKS_KUBECONFIG_ALLOW_PRIVATE:
        if address in ipaddress.ip_network(network, strict=False):
            return None
    if address.is_unspecified:
        return gettext("an unspecified address")
    if address.is_loopback:
        return gettext("a loopback address")
    if address.is_link_local:
        return gettext("a link-local address (such as the cloud's metadata service)")
    if address.is_multicast:
        return gettext("a multicast address")
    if address.is_private or address in ipaddress.ip_network("100.64.0.0/10"):
        return gettext("a private address")
    if not address.is_global:
        return gettext("a reserved or not publicly routable address")
    return None


def _refusal(where: str, what: str) -> str:
    return gettext(
        "%(field)s leads to %(what)s; a kubeconfig that NKS hands out may only reach public "
        "addresses (the operator can allow private ones with NKS_KUBECONFIG_ALLOW_PRIVATE), "
        "so it is refused."
    ) % {"field": where, "what": what}


def server_problems(server: object, api_address: str, where: str) -> list[str]:
    """Why an NKS-sourced kubeconfig's server is refused, from its literal; [] if it is not.

    `api_address` is the cluster's API address as NKS reports it. Messages name the rule and
    the field, never the server's value.
    """
    field = f"{where}.server"
    expected = _endpoint(api_address) if api_address else None
    if expected is None:
        return [
            gettext(
                "NKS has not reported the cluster's API address yet, so %(field)s cannot be "
                "checked against it; try again after the next poll of the cluster."
            )
            % {"field": field}
        ]
    found = _endpoint(server) if isinstance(server, str) else None
    if found is None:
        return []  # leases.kubeconfig names a server that is not a URL
    scheme, host, port = found
    problems = []
    if scheme != "https" and not settings.NKS_KUBECONFIG_ALLOW_HTTP:
        problems.append(
            gettext(
                "%(field)s is plain http; a kubeconfig that NKS hands out must use https "
                "(the token would travel unencrypted), so it is refused."
            )
            % {"field": field}
        )
    if (host, port) != expected[1:]:
        problems.append(
            gettext(
                "%(field)s is not the cluster's API address that NKS reports (%(address)s); "
                "a kubeconfig that NKS hands out may only name that host and port, so it is "
                "refused."
            )
            % {"field": field, "address": f"{expected[1]}:{expected[2]}"}
        )
    literal = _address(host)
    if literal is not None and (what := address_problem(literal)) is not None:
        problems.append(_refusal(field, what))
    return problems


def resolve(host: str, port: int) -> list[IPAddress] | None:
    """Every address a host name (or literal) stands for now; None when it does not resolve."""
    literal = _address(host)
    if literal is not None:
        return [literal]
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    # A scoped IPv6 address (fe80::1%eth0) comes with its zone: the address is before it.
    return [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found]


def addresses_problem(host: str, addresses: list[IPAddress], where: str) -> str | None:
    """Why a name is refused: every address must be allowed, a connection may use any."""
    for address in addresses:
        what = address_problem(address)
        if what is not None:
            logger.warning("NKS-sourced API server %s resolves to %s: refused", host, address)
            return _refusal(f"{where}.server", what)
    return None


def pin_server(configuration: Any, api_address: str) -> None:
    """Check an NKS-sourced client's server and pin it to a checked address.

    `configuration` is the SDK's client configuration, loaded from the kubeconfig; nothing
    is done when `api_address` is empty (not from NKS). Raises EgressRefused naming the rule.
    Pinned, every connection goes to the checked address while TLS still verifies (and SNI
    still sends) the host name, so a DNS answer that changes later cannot redirect it.
    """
    if not api_address:
        return
    where = "the kubeconfig's cluster"
    problems = server_problems(configuration.host, api_address, where)
    if problems:
        raise EgressRefused(" ".join(problems))
    scheme, host, port = _endpoint(configuration.host) or ("", "", 0)
    addresses = resolve(host, port)
    if not addresses:
        raise EgressRefused(
            gettext(
                "The host name of %(field)s does not resolve, so the cluster's API server "
                "cannot be reached."
            )
            % {"field": f"{where}.server"}
        )
    problem = addresses_problem(host, addresses, where)
    if problem is not None:
        raise EgressRefused(problem)
    address = addresses[0]
    if scheme == "https" and not configuration.tls_server_name:
        configuration.tls_server_name = host
    literal = f"[{address}]" if address.version == 6 else str(address)
    # Only the address changes: a path prefix (an API server behind a gateway) stays.
    configuration.host = urlsplit(configuration.host)._replace(netloc=f"{literal}:{port}").geturl()


def check_nks_kubeconfig(data: dict[str, Any], api_address: str) -> None:
    """Refuse a kubeconfig from NKS whose clusters' servers break a rule (every entry: the
    context can be switched later). `data` has passed leases.kubeconfig's check.

    Names that resolve now are checked too, so the engineer who pressed the button learns at
    once; one that does not resolve yet is left to the check at connection.
    """
    problems: list[str] = []
    for entry in data.get("clusters") or []:
        where = f"clusters[{entry_label(entry.get('name'))}].cluster"
        server = (entry.get("cluster") or {}).get("server")
        found = server_problems(server, api_address, where)
        if not found and isinstance(server, str) and (endpoint := _endpoint(server)):
            addresses = resolve(endpoint[1], endpoint[2]) or []
            if (problem := addresses_problem(endpoint[1], addresses, where)) is not None:
                found.append(problem)
        problems += found
    if problems:
        raise EgressRefused(" ".join(problems))
