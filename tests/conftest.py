"""Every test runs with the environment of scripts/env.sh (PATH with .venv and .tools, offline
Pulumi settings), however pytest was started."""
from __future__ import annotations

import os

from tests.helpers import pulumi_env

os.environ.update(pulumi_env())
