"""The SLSA provenance (v1) of a released image: what was built, from which source, with
which parameters, by what. Pure data from the release's plan and the image; cosign
attaches it, signed, to the pushed index (release/signing.py).

https://slsa.dev/spec/v1.0/provenance
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from release.images import Pushed
from release.plan import Plan
from tfjob_operator import published
from tfjob_operator.timeutil import to_rfc3339

PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
#: What a build of this type is: `make release` (release/cli.py) of the repository.
BUILD_TYPE = f"{published.SOURCE}/blob/main/docs/releasing.md#provenance"
#: The builder outside GitHub Actions: whoever ran `make release` on their machine.
LOCAL_BUILDER = f"{published.SOURCE}/blob/main/Makefile#release"


def builder_id(environment: dict[str, str] | None = None) -> str:
    """The workflow that ran the release on GitHub Actions; else the local builder."""
    environment = dict(os.environ) if environment is None else environment
    workflow = environment.get("GITHUB_WORKFLOW_REF")
    server = environment.get("GITHUB_SERVER_URL", "https://github.com")
    return f"{server}/{workflow}" if workflow else LOCAL_BUILDER


def predicate(
    plan: Plan,
    pushed: Pushed,
    commit: str | None,
    started: datetime,
    finished: datetime,
    builder: str,
) -> dict[str, Any]:
    """The provenance predicate of one pushed image."""
    source: dict[str, Any] = {"uri": f"git+{published.SOURCE}@refs/tags/v{plan.version}"}
    if commit:
        source["digest"] = {"gitCommit": commit}
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "version": plan.version,
                "image": pushed.image.name,
                "dockerfile": pushed.image.dockerfile,
                "buildArgs": dict(pushed.image.args),
                "platforms": [f"linux/{b.architecture}" for b in pushed.platforms],
            },
            "resolvedDependencies": [source],
        },
        "runDetails": {
            "builder": {"id": builder},
            "metadata": {
                "startedOn": to_rfc3339(started),
                "finishedOn": to_rfc3339(finished),
            },
            "byproducts": [
                {
                    "name": f"linux/{b.architecture}",
                    "annotations": {"check": b.check, "bytes": b.size},
                }
                for b in pushed.platforms
            ],
        },
    }
