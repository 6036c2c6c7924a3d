# scripts/env.sh: the one place for rustfs-vllm's offline Pulumi settings.
# Sourced by the Makefile, the test suite and the README's commands:  . scripts/env.sh
_rv_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
export RUSTFS_VLLM_ROOT="$_rv_root"
# The dynamic providers are pickled by reference to their modules (components.storage.*, components.serving.*;
# older stacks: components.providers.*, aliased there): make them importable.
export PYTHONPATH="$_rv_root${PYTHONPATH:+:$PYTHONPATH}"
# Our tools first: the built pulumi CLI, the language host, the dynamic-provider shim, the venv.
export PATH="$_rv_root/.tools/bin:$_rv_root/.venv/bin:$PATH"
# A local backend inside the ignored state folder; no pulumi.com, no update checks, no downloads.
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$_rv_root/.state/backend}"
export PULUMI_HOME="${PULUMI_HOME:-$_rv_root/.state/pulumi-home}"
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
export PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK=true
# The passphrase that encrypts the dev and test stacks' secrets. It is a development default:
# for any other stack set PULUMI_CONFIG_PASSPHRASE (or _FILE) yourself before running.
if [ -z "${PULUMI_CONFIG_PASSPHRASE:-}" ] && [ -z "${PULUMI_CONFIG_PASSPHRASE_FILE:-}" ]; then
  export PULUMI_CONFIG_PASSPHRASE="rustfs-vllm-dev-only"
fi
unset _rv_root
