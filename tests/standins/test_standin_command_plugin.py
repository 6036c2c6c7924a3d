"""The OFFLINE STAND-IN for pulumi-command 1.2.1 (standins/command_provider.py), over its gRPC
service: the real provider's diff/replace behaviour, commands really run, failures, secrets."""
from __future__ import annotations

import grpc
import pytest
from pulumi.runtime.proto import provider_pb2

from standins.plugin import SECRET_SIG, decode

TOKEN = "command:local:Command"


def test_reports_the_real_plugin_version(command_plugin):
    from google.protobuf import empty_pb2

    assert command_plugin.stub.GetPluginInfo(empty_pb2.Empty()).version == "1.2.1"


def test_diff_triggers_replace_everything_else_updates(command_plugin):
    old = {"create": "echo a", "triggers": ["x"]}
    same = command_plugin.diff(TOKEN, old, dict(old))
    assert same.changes == provider_pb2.DiffResponse.DIFF_NONE
    trig = command_plugin.diff(TOKEN, old, {**old, "triggers": ["y"]})
    assert list(trig.replaces) == ["triggers"] and not trig.deleteBeforeReplace
    upd = command_plugin.diff(TOKEN, old, {**old, "create": "echo b", "environment": {"A": "1"}})
    assert upd.changes == provider_pb2.DiffResponse.DIFF_SOME and not upd.replaces
    assert sorted(upd.diffs) == ["create", "environment"]


def test_create_update_delete_run_the_commands(command_plugin, tmp_path):
    target = tmp_path / "made"
    inputs = {"create": 'echo "created $WHO" | tee "$TARGET"', "update": 'echo "updated $WHO" > "$TARGET"',
              "delete": 'rm "$TARGET"', "environment": {"TARGET": str(target), "WHO": "me"}}
    id_, props = command_plugin.create(TOKEN, inputs)
    state = decode(props)[0]
    assert target.read_text() == "created me\n" and state["stdout"] == "created me" and id_.startswith("r")
    state = decode(command_plugin.update(TOKEN, id_, state, {**inputs, "environment": {"TARGET": str(target),
                                                                                         "WHO": "you"}}))[0]
    assert target.read_text() == "updated you\n"
    command_plugin.delete(TOKEN, id_, state)
    assert not target.exists()


def test_nothing_runs_in_preview(command_plugin, tmp_path):
    target = tmp_path / "never"
    command_plugin.create(TOKEN, {"create": f"touch {target}"}, preview=True)
    assert not target.exists()


def test_update_without_update_command_reruns_create(command_plugin, tmp_path):
    target = tmp_path / "count"
    inputs = {"create": f"echo x >> {target}", "environment": {"N": "1"}}
    id_, props = command_plugin.create(TOKEN, inputs)
    command_plugin.update(TOKEN, id_, decode(props)[0], {**inputs, "environment": {"N": "2"}})
    assert target.read_text() == "x\nx\n"


def test_failure_names_the_exit_status_command_and_output(command_plugin):
    with pytest.raises(grpc.RpcError) as err:
        command_plugin.create(TOKEN, {"create": "echo to-out; echo to-err >&2; exit 3"})
    text = err.value.details()
    assert "exit status 3" in text and "echo to-out" in text and "to-err" in text


def test_delete_without_delete_command_does_nothing(command_plugin):
    command_plugin.delete(TOKEN, "gone", {"create": "true"})


def test_outputs_are_secret_when_an_input_is(command_plugin):
    _, props = command_plugin.create(TOKEN, {"create": "echo $S | wc -c", "environment": {"S": "hush-0001"}},
                                     secrets={"environment"})
    raw = props.fields["stdout"].struct_value.fields
    assert raw["4dabf18193072939515e22adb298388d"].string_value == SECRET_SIG
    _, props = command_plugin.create(TOKEN, {"create": "echo plain"})
    assert props.fields["stdout"].string_value == "plain"


def test_check_rejects_what_the_stand_in_does_not_implement(command_plugin):
    _, failures = command_plugin.check(TOKEN, {"create": "true", "assetPaths": ["*"], "bogus": 1})
    props = {p for p, _ in failures}
    assert props == {"assetPaths", "bogus"}
    assert any("stand-in" in reason for _, reason in failures)


def test_unknown_resource_type_is_unimplemented(command_plugin):
    with pytest.raises(grpc.RpcError) as err:
        command_plugin.check("command:remote:CopyToRemote", {"remotePath": "/tmp/x"})
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED and "stand-in" in err.value.details()


def test_remote_command_check_names_what_it_does_not_do(command_plugin):
    """The remote command runs over OpenSSH (tests/hosts runs it against real sshds); its check
    refuses what it does not implement, saying so, instead of ignoring it."""
    _, failures = command_plugin.check("command:remote:Command", {
        "create": "true", "environment": {"A": "1"},
        "connection": {"host": "127.0.0.9", "password": "x", "user": "root"}})
    reasons = dict(failures)
    assert "AcceptEnv" in reasons["environment"] and "stand-in" in reasons["environment"]
    assert "not implemented by the offline stand-in" in reasons["connection.password"]
    _, failures = command_plugin.check("command:remote:Command", {"create": "true", "connection": {"port": 22}})
    assert dict(failures)["connection"] == "connection.host is required"
    _, failures = command_plugin.check("command:remote:Command", {
        "create": "true", "stdin": "x", "connection": {"host": "h", "privateKey": "k", "hostKey": "ssh-ed25519 A",
                                                       "dialErrorLimit": 3, "perDialTimeout": 10}})
    assert failures == []


def test_remote_command_fails_after_its_dial_attempts(command_plugin):
    """Nothing listens on 127.0.0.9:1: each attempt is refused, and the error says how many."""
    with pytest.raises(grpc.RpcError) as err:
        command_plugin.create("command:remote:Command", {
            "create": "true", "connection": {"host": "127.0.0.9", "port": 1, "dialErrorLimit": 2}})
    assert "after 1 failed attempts: dial tcp 127.0.0.9:1:" in err.value.details()
    assert "Connection refused" in err.value.details()
