"""Driver volumes from ``spark.kubernetes.driver.volumes.*``: every mistake names its key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from finishable.api.spec import ApplicationSpec
from finishable.api.volumes import VolumeConfError, driver_volumes

pytestmark = pytest.mark.quick

P = "spark.kubernetes.driver.volumes."


def test_emptydir_and_nfs_volumes() -> None:
    volumes = driver_volumes(
        {
            f"{P}emptyDir.scratch.mount.path": "/scratch",
            f"{P}emptyDir.scratch.options.medium": "Memory",
            f"{P}nfs.share.mount.path": "/share",
            f"{P}nfs.share.mount.readOnly": "true",
            f"{P}nfs.share.options.server": "nfs.local",
            f"{P}nfs.share.options.path": "/exports",
            "spark.executor.memory": "1g",
        }
    )
    assert [v.volume() for v in volumes] == [
        {"name": "scratch", "emptyDir": {"medium": "Memory"}},
        {"name": "share", "nfs": {"server": "nfs.local", "path": "/exports", "readOnly": True}},
    ]


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({f"{P}hostPath.data.mount.path": "/d"}, f"{P}hostPath.data.options.path"),
        ({f"{P}secret.s.mount.path": "/s"}, "the volume type 'secret'"),
        ({f"{P}hostPath.data.mount.where": "/d"}, "mount.where is not one of"),
        ({f"{P}hostPath.data.path": "/d"}, "is not spark.kubernetes.driver.volumes"),
        (
            {f"{P}emptyDir.x.mount.path": "/x", f"{P}emptyDir.x.mount.readOnly": "yes"},
            "'yes' must be true or false",
        ),
        ({f"{P}emptyDir.x.mount.path": "relative"}, "must be an absolute path"),
        ({f"{P}emptyDir.Work_1.mount.path": "/w"}, "must be a DNS label"),
        ({f"{P}emptyDir.config.mount.path": "/w"}, "other than config and work"),
    ],
)
def test_mistakes_name_the_key(conf: dict[str, str], message: str) -> None:
    with pytest.raises(VolumeConfError, match=message.replace(".", r"\.").replace("'", "'")):
        driver_volumes(conf)
    with pytest.raises(ValidationError, match="sparkConf"):
        ApplicationSpec.model_validate({"file": "a.py", "sparkConf": conf})
