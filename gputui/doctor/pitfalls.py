"""The tutorials' three pitfalls, each shown with the real error torch raised here.

The child (``gputui.engine.probe``) makes each mistake on purpose; these checks
put torch's own words next to the remedy. A pitfall shown is ``info`` (an error raised
on purpose says nothing of the machine); one that could not be shown is ``skip``, and NumPy
missing, which breaks ``.numpy()`` everywhere, is ``warn``.
"""

from __future__ import annotations

from gputui.doctor.checks import Check, Status
from gputui.doctor.torch_facts import TorchFacts
from gputui.jobs.events import PitfallShown

MIXED = "pitfall: mixed devices"
NUMPY = "pitfall: .numpy()"
DEVICE_STRING = "pitfall: 'cuda0'"

_META = (
    "torch sees no GPU here, so it is shown with its 'meta' device, which fails the same "
    "device check a GPU tensor does: "
)


def pitfall_checks(torch: TorchFacts, *, python: str = "python") -> list[Check]:
    """One check per pitfall, from what the probe child saw (nothing, if it stopped early)."""
    found = {pitfall.name: pitfall for pitfall in torch.pitfalls}
    numpy_installed = torch.install.numpy_installed if torch.install is not None else None
    return [
        _mixed(found.get("cross-device")),
        _numpy(found.get("numpy"), numpy_installed, python),
        _device_string(found.get("device-string")),
    ]


def _not_shown(name: str) -> Check:
    return Check(name, Status.SKIP, "Not shown: the torch probe did not get that far.")


def _mixed(pitfall: PitfallShown | None) -> Check:
    if pitfall is None:
        return _not_shown(MIXED)
    code = f"`torch.ones(2) + torch.ones(2, device={pitfall.shown_on!r})`"
    return _gpu_pitfall(
        MIXED,
        pitfall,
        code,
        accepted=f"torch accepted {code}",
        lead="A CPU tensor plus a GPU tensor: ",
        tip="put both on one device first: `x.to(device) + y.to(device)`",
    )


def _numpy(pitfall: PitfallShown | None, numpy_installed: bool | None, python: str) -> Check:
    if pitfall is None:
        return _not_shown(NUMPY)
    if pitfall.cpu_error is not None or numpy_installed is False:
        shown = f": `torch.ones(2).numpy()` raises {pitfall.cpu_error}" if pitfall.cpu_error else ""
        return Check(
            NUMPY,
            Status.WARN,
            f"NumPy is not installed, so `.numpy()` fails on every tensor, even on the CPU{shown}",
            f"{python} -m pip install numpy",
        )
    code = f"`torch.ones(2, device={pitfall.shown_on!r}).numpy()`"
    return _gpu_pitfall(
        NUMPY,
        pitfall,
        code,
        accepted=f"{code} worked",
        lead="A GPU tensor has no host memory to share: ",
        tip=(
            "copy to the host first: `t.cpu().numpy()` "
            "(`t.detach().cpu().numpy()` if it needs grad)"
        ),
    )


def _gpu_pitfall(
    name: str, pitfall: PitfallShown, code: str, *, accepted: str, lead: str, tip: str
) -> Check:
    """A mistake made with a GPU tensor: ``info`` with torch's error, ``skip`` (saying what
    happened, ``accepted``) if torch took it. ``lead`` says what the mistake is, before
    ``code``; the meta device's sentence replaces it when there was no GPU to make it on."""
    if pitfall.error is None:
        return Check(name, Status.SKIP, f"Could not be shown: {accepted}.", tip)
    if pitfall.shown_on == "meta":
        lead = _META
    return Check(name, Status.INFO, f"{lead}{code} raises {pitfall.error}", tip)


def _device_string(pitfall: PitfallShown | None) -> Check:
    if pitfall is None:
        return _not_shown(DEVICE_STRING)
    tip = "write `'cuda:0'`: the GPU's index follows a colon"
    if pitfall.error is None:
        return Check(
            DEVICE_STRING,
            Status.SKIP,
            "Could not be shown: torch accepted `torch.device('cuda0')`.",
        )
    return Check(DEVICE_STRING, Status.INFO, f"`torch.device('cuda0')` raises {pitfall.error}", tip)
