"""`TFJobClient.train` and `tfjob-operator submit --train` (client/function_job.py): the
TFJob and the ConfigMap that run a shipped function, as written to the API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tfjob_operator.apiserver.errors import ApiError
from tfjob_operator.client.commands import load_function
from tfjob_operator.client.function_job import FUNCTION_DIR, function_job_name
from tfjob_operator.client.shipping import UnshippableError, ship

from .test_client import FakeRest, client_of

JOBS = "/apis/tfjob.dev/v1/namespaces/ml/tfjobs"
CONFIG_MAPS = "/api/v1/namespaces/ml/configmaps"


def fit_digits(ctx: Any) -> dict[str, float]:
    return {"accuracy": 1.0}


def test_train_creates_the_job_then_its_function_owned_by_it() -> None:
    rest = FakeRest({})
    client_of(rest).train(
        fit_digits,
        workers=3,
        packages=["einops==0.8.1"],
        package_index="https://pypi.internal/simple",
        resources={"requests": {"cpu": "500m"}},
        trainer_args=["--epochs", "2"],
        args=["--width", "8"],
    )
    (_, job_path, job), (_, map_path, config_map) = rest.written
    assert (job_path, map_path) == (JOBS, CONFIG_MAPS)
    assert job["metadata"]["name"] == "fit-digits"
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 3
    pod = worker["template"]["spec"]
    container = pod["containers"][0]
    entry = f"{FUNCTION_DIR}/tfjob_function.py:fit_digits"
    args = container["args"]
    assert args[args.index("--entrypoint") + 1] == entry
    assert args[-5:] == ["--epochs", "2", "--", "--width", "8"]
    assert container["resources"] == {"requests": {"cpu": "500m"}}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[f"{FUNCTION_DIR}/tfjob_function.py"]["subPath"] == "tfjob_function.py"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tfjob-function-source"]["configMap"] == {"name": "fit-digits-function"}
    assert "emptyDir" in volumes["tfjob-function"]
    (installer,) = pod["initContainers"]
    assert installer["command"][-3:] == ["--target", FUNCTION_DIR, "einops==0.8.1"]
    assert installer["image"] == container["image"]
    assert installer["securityContext"] == container["securityContext"]
    assert installer["env"] == [
        {"name": "UV_DEFAULT_INDEX", "value": "https://pypi.internal/simple"}
    ]
    assert installer["terminationMessagePolicy"] == "FallbackToLogsOnError"

    assert config_map["metadata"]["name"] == "fit-digits-function"
    assert config_map["data"]["tfjob_function.py"] == ship(fit_digits).source
    (owner,) = config_map["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("TFJob", "fit-digits", "new")


def test_pss_from_a_parameter_server_and_no_installer_without_packages() -> None:
    """With a claim to create first: the parameter servers write the model's variables
    into the model directory, which every replica must see."""
    rest = FakeRest({})
    client_of(rest).train(fit_digits, name="pss-digits", ps=1, pvc="data", pvc_size="1Gi")
    (_, claim_path, claim), (_, _, job), _ = rest.written
    assert claim_path == "/api/v1/namespaces/ml/persistentvolumeclaims"
    assert claim["metadata"]["name"] == "data"
    assert sorted(job["spec"]["tfReplicaSpecs"]) == ["Chief", "PS", "Worker"]
    for replica in job["spec"]["tfReplicaSpecs"].values():
        assert "initContainers" not in replica["template"]["spec"]


def test_a_function_that_cannot_travel_creates_nothing() -> None:
    rest = FakeRest({})
    with pytest.raises(UnshippableError, match="cannot ship a lambda"):
        client_of(rest).train(lambda ctx: None)
    assert rest.written == []


def test_a_refused_function_deletes_the_job_it_was_for() -> None:
    rest = FakeRest({})
    rest.refuse = {CONFIG_MAPS: 403}
    with pytest.raises(ApiError, match="403"):
        client_of(rest).train(fit_digits)
    assert [(m, p) for m, p, _ in rest.written] == [
        ("POST", JOBS),
        ("POST", CONFIG_MAPS),
        ("DELETE", f"{JOBS}/fit-digits"),
    ]


def test_job_names_come_from_function_names() -> None:
    assert function_job_name("train_model") == "train-model"
    assert function_job_name("_private") == "private"
    assert function_job_name("2fast") == "fn-2fast"


def test_submit_train_loads_a_function_from_a_file(tmp_path: Path) -> None:
    script = tmp_path / "keras_job.py"
    script.write_text("EPOCHS = 3\n\ndef train(ctx):\n    return {'epochs': EPOCHS}\n")
    function = load_function(f"{script}:train")
    assert function(None) == {"epochs": 3}
    assert "EPOCHS = 3" in ship(function).source
    with pytest.raises(ValueError, match="has no function 'absent'"):
        load_function(f"{script}:absent")
    with pytest.raises(ValueError, match="no file"):
        load_function(f"{tmp_path}/nothing.py:train")
    with pytest.raises(ValueError, match=r"expected FILE\.py:FUNCTION"):
        load_function("train")
