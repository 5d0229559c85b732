# Two commands on a fresh machine: `make run` and `make test`. Both are idempotent.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
BIN := $(VENV)/bin
# The newest Python >= 3.11 on the machine.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
	&& { echo $$p; break; }; done)
STAMP := $(VENV)/.installed
PYTEST_ARGS ?= -n 2

.PHONY: help install run test lint format lock clean messages compilemessages image

help:
	@echo "make run    start the dashboard with a demo cluster on http://127.0.0.1:8000"
	@echo "make test   run the test suite"
	@echo "make lint   ruff check + format check"
	@echo "make image  build the container image (docker or podman), labelled with version and commit"
	@echo "make messages         extract the texts to translate into locale/ko (needs GNU gettext)"
	@echo "make compilemessages  compile every locale/**/django.po into its .mo (committed)"

# requirements-dev.lock is requirements-dev.txt with every file's hash (see the README): a
# changed or substituted download fails the install, and --no-deps pulls in nothing unpinned.
$(STAMP): requirements.txt requirements-dev.txt requirements.lock requirements-dev.lock
	@test -n "$(PYTHON)" || { echo "Python 3.11 or newer is required" >&2; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements-dev.lock
	@touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py createcachetable
	$(BIN)/python manage.py ensure_demo_user
	$(BIN)/python manage.py setup_demo
	@echo "Dashboard: http://127.0.0.1:$${DASHBOARD_PORT:-8000}  (Ctrl-C stops everything)"
	@# Alert mail goes to the console backend unless EMAIL_URL says otherwise. The fake NKS's
	@# kubeconfigs name the fake API server, plain http on loopback: the demo allows that.
	PATH="$(abspath $(BIN)):$$PATH" ALERT_EMAIL_TO="$${ALERT_EMAIL_TO:-oncall@localhost}" \
		NKS_KUBECONFIG_ALLOW_PRIVATE=127.0.0.0/8 NKS_KUBECONFIG_ALLOW_HTTP=true \
		$(BIN)/honcho start -f Procfile

test: install
	$(BIN)/pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The container image, with OCI labels saying which version and commit it holds. IMAGE names
# the repository to push to (your registry's name goes in IMAGE, never in the repository).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
REVISION := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE ?= lease-dashboard
CONTAINER ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)

image:
	@test -n "$(CONTAINER)" || { echo "make image needs docker or podman" >&2; exit 1; }
	$(CONTAINER) build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
		--build-arg SOURCE="$(SOURCE)" -t $(IMAGE):$(VERSION) -t $(IMAGE):latest .

# Translations (issue 12). `make messages` extracts every marked text of the product (not the
# fakes, tests, benchmarks or manifests) and merges it into locale/ko/LC_MESSAGES/django.po:
# new texts arrive untranslated, changed ones fuzzy; translate them, then `make
# compilemessages`. The .mo files are committed, so `make run` and the image need no gettext.
MESSAGE_IGNORES := --ignore='fakes/*' --ignore='tests/*' --ignore='bench/*' --ignore='.venv/*' \
	--ignore='deploy/*' --ignore='var/*' --ignore='staticfiles/*'

messages: install
	@command -v xgettext >/dev/null || { echo "GNU gettext is needed: apt-get install -y gettext" >&2; exit 1; }
	$(BIN)/python manage.py makemessages -l ko --no-obsolete $(MESSAGE_IGNORES)
	@echo "Untranslated: $$(msgattrib --untranslated locale/ko/LC_MESSAGES/django.po | grep -c '^msgid ' || true)," \
	      "fuzzy: $$(msgattrib --only-fuzzy locale/ko/LC_MESSAGES/django.po | grep -c '^msgid ' || true)" \
	      "(each count includes the header)"

# msgfmt directly, not `manage.py compilemessages`: that one walks every folder named
# locale, the virtualenv's packages included.
compilemessages:
	@command -v msgfmt >/dev/null || { echo "GNU gettext is needed: apt-get install -y gettext" >&2; exit 1; }
	@find locale -name django.po | while read -r po; do \
		msgfmt --check -o "$${po%.po}.mo" "$$po" || exit 1; echo "compiled $$po"; done

# Re-pin requirements*.txt from pyproject.toml in throw-away virtualenvs.
lock:
	rm -rf /tmp/lock-rt /tmp/lock-dev
	$(PYTHON) -m venv /tmp/lock-rt && /tmp/lock-rt/bin/pip install --quiet .
	$(PYTHON) -m venv /tmp/lock-dev && /tmp/lock-dev/bin/pip install --quiet '.[dev]'
	{ echo "# Runtime dependencies, pinned. Regenerate with: make lock"; \
	  /tmp/lock-rt/bin/pip freeze --exclude lease-dashboard; } > requirements.txt
	{ echo "# Development and test dependencies, pinned. Regenerate with: make lock"; \
	  echo "-r requirements.txt"; \
	  comm -23 <(/tmp/lock-dev/bin/pip freeze --exclude lease-dashboard | sort) \
	           <(/tmp/lock-rt/bin/pip freeze --exclude lease-dashboard | sort); } > requirements-dev.txt

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache
