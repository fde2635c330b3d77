PYTHON ?= python

.PHONY: evidence
evidence:
	$(PYTHON) docs/evidence/run_all.py
