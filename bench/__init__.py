"""The benchmark: todo-agent against a floor, on loopback, with a fake model (`make bench`)."""
