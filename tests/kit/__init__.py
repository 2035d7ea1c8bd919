"""The tests' shared kit: what more than one test file needs, imported as ``tests.kit.<module>``.

* :mod:`tests.kit.models`: tiny models, their data and a quiet CPU ``Trainer`` for real fits.
* :mod:`tests.kit.readers`: read back what the writers wrote (TensorBoard's and wandb's own
  readers).
* :mod:`tests.kit.record_entries`: run-record entries written directly, for the views' tests.
* :mod:`tests.kit.browser`: headless Chromium (Selenium) and the page helpers; the ``browser``
  fixture itself is in ``tests/conftest.py``.
* :mod:`tests.kit.tb_server`: a real ``tensorboard`` server on 127.0.0.1.
* :mod:`tests.kit.s3_server`: a local S3 server (moto) behind a proxy that injects faults; a
  pytest plugin (``pytest_plugins = ["tests.kit.s3_server"]``).
* :mod:`tests.kit.cli_parts`: what the LightningCLI tests name in their YAML.

Nothing is imported here, so importing one module of the kit imports no other (the S3 plugin
must not be imported before pytest registers it).
"""
