"""Runs the test OpenID provider as its own process: `manage.py runserver` on a free port.

The provider has its own settings, its own SQLite database in a temporary folder, and its
own cookies; the dashboard reaches it over real HTTP, exactly as it would a company's
provider. Its request log is kept, so tests can count what the dashboard asked for.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urljoin

import requests

HERE = Path(__file__).resolve().parent
CLIENT_ID = "lease-dashboard"
# Long and random-looking, so a test can search pages and logs for it without false alarms.
CLIENT_SECRET = "op-test-secret-5f0c2b7e9a1d4c3b8e6f"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class OidcProvider:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/openid"
        self.log_path = directory / "provider.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))},
            "DJANGO_SETTINGS_MODULE": "op_site.settings",
            "OP_DATABASE": str(directory / "provider.sqlite3"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.subjects: dict[str, str] = {}  # user name → `sub`, as seeded

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=HERE,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"provider manage.py {args[0]} failed:\n{result.stderr}")
        return result.stdout

    def seed(
        self,
        *,
        redirect_uris: list[str] | None = None,
        users: dict[str, list[str]] | None = None,
        preferred_usernames: dict[str, str] | None = None,
    ) -> dict[str, str]:
        """Register the dashboard's redirect URIs and set users' groups (password: name-pass).

        A user's `preferred_username` claim is their name unless `preferred_usernames` gives
        another. Returns (and keeps in `subjects`) each seeded user's `sub`.
        """
        args = ["seed_provider", "--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET]
        for uri in redirect_uris or []:
            args += ["--redirect-uri", uri]
        preferred = preferred_usernames or {}
        for name, groups in (users or {}).items():
            args += ["--user", f"{name}:{name}-pass:{','.join(groups)}:{preferred.get(name, '')}"]
        output = self.manage(*args)
        self.subjects.update(re.findall(r"^subject (.+) (\S+)$", output, flags=re.MULTILINE))
        return self.subjects

    def start(self) -> None:
        self.manage("migrate", "--noinput", "-v", "0")
        self.manage("seed_provider")  # the signing key
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "runserver",
                f"127.0.0.1:{self.port}",
                "--noreload",
                "--skip-checks",
            ],
            cwd=HERE,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the provider exited:\n{self.log_path.read_text()}")
            try:
                requests.get(f"{self.issuer}/.well-known/openid-configuration", timeout=1)
                return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError(f"the provider did not answer within 30 s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def requests_seen(self, path: str) -> int:
        """How many requests for this path the provider has served so far."""
        pattern = re.compile(rf'"[A-Z]+ {re.escape(path)}[ ?]')
        return len(pattern.findall(self.log_path.read_text(errors="replace")))

    def sign_in(self, authorize_url: str, username: str, password: str | None = None) -> str:
        """Play the browser at the provider; returns the URL it sends back to the dashboard."""
        browser = requests.Session()
        response = browser.get(authorize_url, timeout=10)  # follows to the login form
        assert "op_csrftoken" in browser.cookies, f"no login form at the provider:\n{response.text}"
        token = browser.cookies["op_csrftoken"]
        next_url = re.search(r'name="next" value="([^"]*)"', response.text)
        assert next_url is not None, response.text
        response = browser.post(
            response.url,
            data={
                "csrfmiddlewaretoken": token,
                "username": username,
                "password": password or f"{username}-pass",
                "next": next_url.group(1).replace("&amp;", "&"),
            },
            headers={"Referer": response.url},
            allow_redirects=False,
            timeout=10,
        )
        assert response.status_code == 302, response.text
        response = browser.get(
            urljoin(response.url, response.headers["Location"]), allow_redirects=False, timeout=10
        )
        assert response.status_code == 302, response.text
        return response.headers["Location"]


@contextmanager
def running_provider(directory: Path) -> Iterator[OidcProvider]:
    provider = OidcProvider(directory)
    try:
        provider.start()
        yield provider
    finally:
        provider.stop()
