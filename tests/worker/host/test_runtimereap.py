"""What `runtime-reap` reads of containerd's containers: the runtime Docker ran each under (its runc options, as
containerd keeps them: protobuf in base64, here as `ctr containers info` printed them on this machine)."""

from __future__ import annotations

from pi_dispatch.worker.host.runtimereap import BINARY_FIELD, ROOT_FIELD, orphans, ran_under_runsc, runc_options

# `ctr -n moby containers info <id>` of a container Docker ran under runsc, and of one under runc (no options)
RUNSC_INFO = {
    "Runtime": {
        "Name": "io.containerd.runc.v2",
        "Options": {
            "type_url": "containerd.runc.v1.Options",
            "value": "Mh4vdmFyL2xpYi9kb2NrZXIvcnVudGltZXMvcnVuc2M6HC92YXIvcnVuL2RvY2tlci9ydW50aW1lLXJ1bmM=",
        },
    }
}
RUNC_INFO = {"Runtime": {"Name": "io.containerd.runc.v2", "Options": {"type_url": "containerd.runc.v1.Options"}}}


def test_the_runtime_and_its_root_are_read_from_containerds_encoded_options() -> None:
    fields = runc_options(RUNSC_INFO)
    assert (
        fields[BINARY_FIELD] == "/var/lib/docker/runtimes/runsc"
        and fields[ROOT_FIELD] == "/var/run/docker/runtime-runc"
    )
    assert ran_under_runsc(RUNSC_INFO) and not ran_under_runsc(RUNC_INFO)


def test_only_what_docker_does_not_know_and_ran_under_runsc_is_an_orphan() -> None:
    infos: dict[str, object] = {"a": RUNSC_INFO, "b": RUNSC_INFO, "c": RUNC_INFO, "d": "not json's shape"}
    assert orphans(["a", "b", "c", "d"], {"b"}, infos) == ["a"]


def test_hostile_options_are_read_as_nothing() -> None:
    for value in ("not base64!", "", "////", "Mv8=", "MoCAgIAQ"):  # bad text, a length past the end, a huge varint
        info = {"Runtime": {"Options": {"value": value}}}
        assert not ran_under_runsc(info)
