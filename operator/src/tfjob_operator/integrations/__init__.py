"""The integrations: each in a module of its own, behind the interface of base.py, and all
of them in one list (`integrations`). Adding one touches its module and that list.

The order is the order in which a decision asks them and the controller applies their
writes, within their stage (base.Stage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Integration
from .disruption import DisruptionBudget
from .gang import USUAL_GANG_SCHEDULERS, GangSchedulers, GangScheduling
from .kueue import Kueue
from .tensorboard import TensorBoard


@dataclass(frozen=True)
class Settings:
    """The operator's flags the integrations read."""

    gangs: GangSchedulers = USUAL_GANG_SCHEDULERS
    #: Runs the TensorBoards of jobs that name no image.
    tensorboard_image: str | None = None
    cluster_domain: str | None = None


def integrations(settings: Settings = Settings()) -> tuple[Integration[Any, Any], ...]:
    return (
        Kueue(),
        GangScheduling(settings.gangs),
        TensorBoard(settings.tensorboard_image, settings.cluster_domain),
        DisruptionBudget(),
    )
