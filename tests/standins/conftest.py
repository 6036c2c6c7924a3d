"""Fixtures: this project's offline stand-in plugins, started as the engine starts them."""
from __future__ import annotations

import pytest

from tests.plugin_client import PluginClient


@pytest.fixture(scope="module")
def docker_plugin():
    c = PluginClient("standins.docker_provider")
    yield c
    c.close()


@pytest.fixture(scope="module")
def command_plugin():
    c = PluginClient("standins.command_provider")
    yield c
    c.close()
