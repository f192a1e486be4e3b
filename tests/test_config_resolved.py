"""``MethodConfig.resolved()`` is the config part of every run's identity (a run's key hashes it), so it must not
drift when the config code changes: every shipped Table 1 / Table 2 config (both protocols, all methods) and a few
derived configs resolve to the same canonical JSON as before the method extras became a typed dataclass.

The hashes below were computed with the code of main at commit c52e468 (before ``Extras`` existed; ``resolved()``
then read the ``EXTRA`` dict through ``MethodConfig.get``), by this script run with ``PYTHONPATH=/work/main/src``::

    for name in names():                                   # kappalab.configs.names
        if name.startswith(("table1_", "table2_", "linear_")):
            try:
                cfg = load_config(name)                    # the base files lack fields and are skipped
            except ConfigError:
                continue
            print(name, sha256(canonical(cfg.resolved())))  # kappalab.reproduce.identity.canonical

and the same for the derived configs of :data:`DERIVED`. They are pasted, not recomputed: a changed default, a value
cast on load, a renamed key or a lost ``inner_lr = eta`` changes a hash and fails here.
"""

from __future__ import annotations

import hashlib
from typing import Callable

import pytest

from kappalab.configs import ConfigError, names
from kappalab.immunization.config import MethodConfig, load_config
from kappalab.reproduce.identity import canonical

SHA256_BEFORE = {
    "table1_official_imma": "519d0bf61fbe11701787eb011ed520f67a5ef09f43ae254c727b783fc44ec558",
    "table1_official_opt_kappa": "eaef8b6289d90ac2b7648980b0d083c6503a34ab111c7abd7fc794e57a8eaf26",
    "table1_official_ours": "0553524410e4cb8da6af8e22d6eb431296c5e19930cacf9ba08fbd7f4a2be378",
    "table1_official_rill_only": "841fad67a2000414bf771f70bffc0ded22ebea5c7e1ad9236064186500b2297b",
    "table1_paper_imma": "1772b0e086042dc2b17b47af4f9eccc6e152dc2a52736875322fdea251cf0b93",
    "table1_paper_imma_bilevel30": "9d252b6d16f569c295453c8eb547654f29e1b84bdd81aca69dfe114228c16dd3",
    "table1_paper_opt_kappa": "01f21ee77aa34c2ccf4cae5409ba6a73e72ea486dba9982e2ceb767a1aebc5ef",
    "table1_paper_opt_kappa_log": "2f0987233a2d4d82c8c6efe018919f048b62b60e38e4a502973b0d80c1074563",
    "table1_paper_ours": "d0b653649cbee39bd59728fbabfb6657bda40b5328967eb0bfc5065e79f1c596",
    "table1_paper_rill_only": "d2695a1737e244437ed3c0da84f73a66d5236b8e31450d5796633b908eaf1489",
    "table2_official_imma": "f4876582557c6350ec0e47142baad62de933e8374c26d10162c46d37708c56c2",
    "table2_official_opt_kappa": "a19afd7bd586999ae9926129974788d57dc72f83e3676f042fd80080388c3deb",
    "table2_official_ours": "f20a3d1ec893e95c99cd9580ba967768d99adf24dc46246c6a87a8d18126265a",
    "table2_official_rill_only": "193f67047a78cc1e0ad68675a7868fc2acea2a9c309a4fe399b6537f1ed92b8e",
    "table2_paper_imma": "de73e117bd972fa371aa89a64c9ce0733a48b3d5fa1e869ef540a4c814d2cdd2",
    "table2_paper_opt_kappa": "abdb16b7367bdb0e2c7d9837d6a9cd051902c77524914ae2fb5735dfbd382551",
    "table2_paper_ours": "64ef78975cd68ba4bd63fb964dd22dbd33681fb5a26c8c6b010e7045710a8504",
    "table2_paper_rill_only": "be96250936fad091c3c39362becf4e817010b43d8e1ddaf252bb74ce237ad30d",
}

#: configs made from a shipped one as the command lines make them: ``--set`` overrides (a JSON list for adam_betas,
#: a bool, an int) and ``--lrs``'s ``replace(eta=...)`` (inner_lr's default follows eta: table1_paper_ours leaves it
#: unset, table1_paper_imma sets it)
DERIVED: dict[str, Callable[[], MethodConfig]] = {
    "table1_paper_imma+replace(eta=0.02)": lambda: load_config("table1_paper_imma").replace(eta=0.02),
    "table1_paper_ours+replace(eta=0.02)": lambda: load_config("table1_paper_ours").replace(eta=0.02),
    "table2_paper_ours+set": lambda: load_config("table2_paper_ours", {"eta": 0.002, "extra.shift": 1e-5,
                                                                       "extra.theta_init": "identity"}),
    "table1_official_ours+set": lambda: load_config("table1_official_ours", {
        "extra.adam_betas": [0.8, 0.99], "extra.monitor_every": 5, "extra.shuffle": False}),
}
SHA256_DERIVED_BEFORE = {
    "table1_paper_imma+replace(eta=0.02)": "333963d37ed96e320f3c90ecb8a37177dded21122b1bbb8bedd6050a3bedd0fe",
    "table2_paper_ours+set": "b69ab62f861f37ecf37567a9610fe6375c77bf5eb27f40448b620323c70e8750",
    "table1_paper_ours+replace(eta=0.02)": "02ccb804b44718142c7e7c7b853a0670d0cf5b006cfa4b88bf919e8c6473f72f",
    "table1_official_ours+set": "157d13b10aa405f15e244ba2224222f21159ad02c1580cd0df8888157165a840",
}


def _sha256(cfg: MethodConfig) -> str:
    return hashlib.sha256(canonical(cfg.resolved()).encode()).hexdigest()


def _loadable() -> list[str]:
    out = []
    for name in names():
        if name.startswith(("table1_", "table2_", "linear_")):
            try:
                load_config(name)
            except ConfigError:
                continue
            out.append(name)
    return out


def test_every_shipped_run_config_has_its_hash() -> None:
    """Both protocols x the four methods of each table and the hint baselines; a new config needs its hash here."""
    loadable = _loadable()
    assert len(loadable) == 18 and set(loadable) == set(SHA256_BEFORE)


@pytest.mark.parametrize("name", sorted(SHA256_BEFORE))
def test_shipped_config_resolves_to_its_recorded_hash(name: str) -> None:
    assert _sha256(load_config(name)) == SHA256_BEFORE[name], load_config(name).resolved()


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_derived_config_resolves_to_its_recorded_hash(name: str) -> None:
    cfg = DERIVED[name]()
    assert _sha256(cfg) == SHA256_DERIVED_BEFORE[name], cfg.resolved()
