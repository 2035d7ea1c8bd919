"""learnscope's tests: a package, so that every test imports the shared kit as ``tests.kit``."""
