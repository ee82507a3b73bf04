.PHONY: demo test test-fast bench

demo:  ## set up and run the example site with a real local Assistants server
	bash scripts/demo.sh $(if $(CHECK),--check,)

test:  ## lint, type-check and run every test (sets up what it needs)
	bash scripts/test.sh

test-fast:  ## the contributor's loop: lint, types, the client and the SQLite admin/API tests, no browser
	bash scripts/test-fast.sh

bench:  ## run the benchmarks and write docs/benchmarks.md
	bash scripts/setup.sh && .venv/bin/python bench/run_all.py
