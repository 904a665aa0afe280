"""migfit.requests: the annotation contract and the decision record the extender reads."""

from __future__ import annotations

import pytest

from migfit import requests

C = ["main", "side"]


def test_pod_wide_key_goes_to_the_first_container_or_the_default_one() -> None:
    assert requests.parse({requests.GPU_MEMORY: "12Gi"}, containers=C).requests == (
        requests.GpuRequest(container="main", memory_bytes=12 * 2**30),)
    parsed = requests.parse({requests.GPU_MEMORY: "1Gi", requests.DEFAULT_CONTAINER: "side"},
                            containers=C)
    assert [r.container for r in parsed.requests] == ["side"]
    odd = requests.parse({requests.GPU_MEMORY: "1Gi", requests.DEFAULT_CONTAINER: "gone"},
                         containers=C)
    assert [r.container for r in odd.requests] == ["main"] and "names no container" in odd.notes[0]


def test_per_container_keys_override_and_add() -> None:
    parsed = requests.parse({requests.GPU_MEMORY: "1Gi", "migfit.io/gpu-memory.main": "2Gi",
                             "migfit.io/gpu-memory.side": "3Gi", requests.GPU_COMPUTE: "2",
                             "migfit.io/gpu-media.side": "true"}, containers=C)
    assert parsed.requests == (
        requests.GpuRequest(container="main", memory_bytes=2 * 2**30, compute=2),
        requests.GpuRequest(container="side", memory_bytes=3 * 2**30, compute=2, media=True))
    assert parsed.requests[0].memory_mib == 2048


@pytest.mark.parametrize(("annotations", "hint"), [
    ({"migfit.io/gpu-memory.nope": "1Gi"}, "names no container of this pod; use one of: main"),
    ({"migfit.io/gpu-memory.init": "1Gi"}, "init container 'init'"),
    ({requests.GPU_MEMORY: "0"}, "more than zero"),
    ({requests.GPU_MEMORY: "-5Gi"}, "more than zero"),
    ({requests.GPU_MEMORY: "5 Gi"}, "not a Kubernetes quantity"),
    ({requests.GPU_MEMORY: "1Gi", requests.GPU_COMPUTE: "two"}, "whole number"),
    ({requests.GPU_MEMORY: "1Gi", requests.GPU_COMPUTE: "0"}, "at least 1 compute slice"),
    ({requests.GPU_MEMORY: "1Gi", requests.GPU_MEDIA: "maybe"}, '"true" or "false"'),
    # No space around a value, as none around a gpu-memory quantity.
    ({requests.GPU_MEMORY: "1Gi", requests.GPU_COMPUTE: " 2"}, "remove the surrounding white"),
    ({requests.GPU_MEMORY: "1Gi", requests.GPU_COMPUTE: "2\n"}, "remove the surrounding white"),
    ({requests.GPU_MEMORY: "1Gi", requests.GPU_MEDIA: "true "}, "remove the surrounding white"),
])
def test_errors_say_what_to_change(annotations: dict[str, str], hint: str) -> None:
    with pytest.raises(requests.RequestError) as exc:
        requests.parse(annotations, containers=C, init_containers=["init"])
    assert hint in exc.value.message


def test_no_memory_key_is_no_request() -> None:
    assert requests.parse({"a": "b"}, containers=C).requests == ()
    assert not requests.has_request({requests.GPU_COMPUTE: "2"})
    assert requests.has_request({"migfit.io/gpu-memory.side": "1Gi"})


def test_decision_record_round_trip_and_strict_decoding() -> None:
    record = requests.DecisionRecord(v=1, strategy="mixed", containers=[
        requests.DecisionContainer(container="main", request_mib=12288, profile="2g.20gb",
                                   resource="nvidia.com/mig-2g.20gb", models=["A100-80GB"])])
    text = requests.encode_decision(record)
    assert text == ('{"v":1,"strategy":"mixed","containers":[{"container":"main",'
                    '"request_mib":12288,"profile":"2g.20gb",'
                    '"resource":"nvidia.com/mig-2g.20gb","models":["A100-80GB"]}]}')
    assert requests.decode_decision(text) == record
    assert requests.profile_annotation(record) == "2g.20gb"
    assert requests.decision_of({requests.DECISION: text}) == record
    for bad in ["", "[]", '{"v":2,"strategy":"mixed","containers":[]}',
                '{"v":1,"strategy":"none","containers":[]}',
                '{"v":1,"strategy":"mixed","containers":[{"container":"a"}]}',
                '{"v":true,"strategy":"mixed","containers":[]}',
                '{"v":1,"strategy":"mixed","containers":[],"x":1}']:
        with pytest.raises(requests.RequestError):
            requests.decode_decision(bad)
        assert requests.decision_of({requests.DECISION: bad}) is None


def test_a_default_container_naming_an_init_container_says_so() -> None:
    """It names a container, an init one: "names no container" was wrong."""
    got = requests.parse({"migfit.io/gpu-memory": "8Gi",
                          "kubectl.kubernetes.io/default-container": "init"},
                         containers=["main"], init_containers=["init"])
    assert [r.container for r in got.requests] == ["main"]
    assert "names an init container; migfit.io/gpu-memory applies to the first container" \
        in got.notes[0]


@pytest.mark.parametrize(("value", "why"), [
    ("8", "is 8 bytes, less than 1Mi: GPU memory needs a unit; did you mean 8Gi?"),
    ("8Ki", "is 8192 bytes, less than 1Mi: too little for any GPU instance; write an amount "
            "such as 12Gi"),
    # m is milli: 100m is a tenth of a byte (it was called "1 byte", rounded up)
    ("100m", "is 0.1 bytes, less than 1Mi: m is milli, a thousandth; did you mean 100Mi?"),
    ("1e-3", "is 0.001 bytes, less than 1Mi: GPU memory needs a unit"),
])
def test_an_amount_below_1mi_is_called_what_it_is(value: str, why: str) -> None:
    """8Ki has a unit: the message said it needed one."""
    with pytest.raises(requests.RequestError, match=why.replace("?", r"\?")):
        requests.parse_memory("migfit.io/gpu-memory", value)
