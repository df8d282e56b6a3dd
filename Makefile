.PHONY: setup demo lint test bench
setup: ; ./dev setup
demo: ; ./dev demo
lint: ; ./dev lint
test: ; ./dev test
bench: ; ./dev bench
