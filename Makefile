# The two commands: `make run` and `make test`. Both set up what they need and are
# quick when nothing changed (the virtualenv is rebuilt only when requirements change).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test install lint docs format bench clean services-down messages manage screenshots drill

$(STAMP): requirements.txt requirements-dev.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing dependencies into $(VENV) (pip's full output: $(VENV)/pip.log)…"
	@# One line per package pip collects or builds, then the install step and any error; pip's exit
	@# status is kept through the pipe (POSIX sh has no pipefail).
	@{ $(BIN)/pip install --disable-pip-version-check --progress-bar off -r requirements-dev.txt 2>&1; \
		echo $$? >$(VENV)/pip.rc; } | tee $(VENV)/pip.log | awk \
		'/^(Collecting|Processing) / { n = split($$2, part, "/"); print "  collecting " part[n]; fflush() } \
		/^ *Building wheel for / { print "  building " $$4; fflush() } \
		/^Installing collected packages/ { print "  installing the collected packages…"; fflush() } \
		/^Successfully installed/ { print "  installed"; fflush() } \
		/^(ERROR|error)/ { print; fflush() }'; \
		exit $$(cat $(VENV)/pip.rc)
	@touch $(STAMP)

install: $(STAMP)

# The local settings unless DJANGO_SETTINGS_MODULE says otherwise (every entry point
# defaults to the production settings). nginx, the front door, is installed when missing
# (Debian's package; devtools/stack.py stops with the reason when it cannot be found).
run: $(STAMP)
	@bash .ci/system-packages nginx
	@DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-config.settings.local} $(BIN)/python -m devtools.stack

test: $(STAMP)
	@bash .ci/system-packages
	@$(BIN)/python -m pytest $(PYTEST_ARGS)

# A management command on the local settings and the embedded servers (or DATABASE_URL /
# REDIS_URL): make manage ARGS="createsuperuser"
manage: $(STAMP)
	@DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-config.settings.local} \
		$(BIN)/python -m devtools.embedded run -- $(BIN)/python manage.py $(ARGS)

# docs/screenshots/ of the admin live view, the anomaly page and the order page, from the
# whole stack on its own embedded servers (or DATABASE_URL / REDIS_URL) and Chromium.
# The win mail in both languages first, without the stack (SCREENSHOTS_ARGS=--mails-only: only them).
screenshots: $(STAMP)
	@bash .ci/system-packages
	@$(BIN)/python -m devtools.screenshots $(SCREENSHOTS_ARGS)

# Style, types and the layering (import-linter contracts in pyproject.toml). mypy's Django
# plugin imports the test settings, which want the two URLs: placeholders, nothing connects.
lint: $(STAMP)
	@echo "ruff…" && $(BIN)/ruff check . && $(BIN)/ruff format --check .
	@echo "mypy…" && DATABASE_URL=postgres://localhost/x REDIS_URL=redis://localhost:6379/0 $(BIN)/mypy
	@echo "import-linter…" && $(BIN)/lint-imports --no-cache

# The documentation site into site/ (mkdocs.yml): strict, so any warning (a broken link or
# anchor, a page outside the nav) fails. The reference pages of the API, the commands and the
# metrics are generated from the code at build time (devtools/docs_reference.py).
docs: $(STAMP)
	@$(BIN)/mkdocs build --strict --quiet

format: $(STAMP)
	@$(BIN)/ruff format . && $(BIN)/ruff check --fix .

# Every HTTP measurement through nginx, the front door (installed when missing, as for make run).
bench: $(STAMP)
	@bash .ci/system-packages nginx
	@$(BIN)/python -m bench.run $(BENCH_ARGS)

# A sale rehearsal with Locust (rehearsal/run.py): the shop started as make run starts it (or
# --url of a running one), a tagged rehearsal sale and its shoppers, shoppers that shop as the
# pages do, then a report with charts and a verdict (exit 1 when red), e.g.
# make rehearse REHEARSE_ARGS="--shoppers 10000 --units 500 --admission room"; --web, --clean.
rehearse: $(STAMP)
	@bash .ci/system-packages nginx
	@DJANGO_SETTINGS_MODULE=$${DJANGO_SETTINGS_MODULE:-config.settings.local} $(BIN)/python -m rehearsal.run $(REHEARSE_ARGS)

# The multi-host drills (root: hosts as network namespaces; docs/DRILLS.md), e.g.
# make drill DRILL_ARGS="--drills 1,2 --short"
drill: $(STAMP)
	@bash .ci/system-packages
	@$(BIN)/python -m devtools.drill $(DRILL_ARGS)

# Shopper-page translations: refresh the .po from the code, then compile the committed .mo
# (needs gettext; installed with apt when missing and possible).
messages: $(STAMP)
	@command -v msgfmt >/dev/null || (apt-get update -qq && apt-get install -y -qq gettext)
	@DJANGO_SETTINGS_MODULE=config.settings.local $(BIN)/python -m devtools.embedded run -- $(BIN)/python manage.py makemessages -l zh_Hans --no-wrap --no-location \
		--ignore '.venv/*' --ignore '.local/*' --ignore 'staticfiles/*' --ignore 'tests/*' --ignore 'bench/*'
	@DJANGO_SETTINGS_MODULE=config.settings.local $(BIN)/python -m devtools.embedded run -- $(BIN)/python manage.py compilemessages -l zh_Hans --ignore '.venv/*'

services-down: $(STAMP)
	@$(BIN)/python -m devtools.embedded down

clean: services-down
	rm -rf $(VENV) .local staticfiles
