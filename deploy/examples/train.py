"""A PyTorch training loop that resumes from its last checkpoint and checkpoints on USR1.

Used by train.sbatch. On SIGUSR1 (Slurm's warning before the time limit, or Mirage's
handoff) it finishes the current step, writes a checkpoint atomically and exits 0. It
also checkpoints every ``--every`` steps, so a segment killed at its limit loses at most
that much. When the planned number of steps is done it writes the completion marker
``DONE`` (the chain's ``--until-file``). After its first step it tells Mirage that
training has resumed (``mirage_handoff.resumed()``, from the helper beside it), so that
the daemon measures the chain's restart overhead.

Environment (defaults of the options): ``TRAIN_STEPS`` (``--steps``, 100000 in all),
``TRAIN_STEP_S`` (``--step-s``, seconds paused after each step, 0: a test uses it to
make training span several short segments), ``TRAIN_EVERY`` (``--every``, 1000).
"""

from __future__ import annotations

import signal


class Signalled:
    """Set by the USR1 handler, read between steps."""

    stop = False


def on_usr1(_signum: int, _frame: object) -> None:
    Signalled.stop = True


# Before the slow imports: a USR1 that comes while torch loads must not kill the process.
signal.signal(signal.SIGUSR1, on_usr1)

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402


def options() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint-dir", type=Path, required=True)
    p.add_argument("--steps", type=int, default=int(env("TRAIN_STEPS", "100000")))
    p.add_argument("--step-s", type=float, default=float(env("TRAIN_STEP_S", "0")))
    p.add_argument("--every", type=int, default=int(env("TRAIN_EVERY", "1000")))
    return p.parse_args()


def main() -> int:
    args = options()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    ckpt = args.checkpoint_dir / "last.pt"
    step = 0
    if ckpt.exists():
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        print(f"resumed at step {step}", flush=True)
    else:
        print("starting from step 0", flush=True)

    def save() -> None:
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
        tmp.replace(ckpt)  # never a half-written checkpoint

    first = True
    while step < args.steps:
        if Signalled.stop:  # also a signal that came before the first step
            save()
            print(f"signalled: checkpointed at step {step}, exiting", flush=True)
            return finish()
        x = torch.randn(128, 64, device=device)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if first:  # training has resumed: the end of this segment's restart overhead
            report_resumed()
            first = False
        if step % args.every == 0:
            save()
        if args.step_s > 0:
            time.sleep(args.step_s)
    save()
    (args.checkpoint_dir / "DONE").write_text(f"{step}\n")
    print(f"training complete at step {step}", flush=True)
    return finish()


def report_resumed() -> None:
    """Tell Mirage when training resumed (mirage_handoff.py, beside this file: the daemon
    measures each chain's restart overhead from it); without the helper, nothing."""
    try:
        import mirage_handoff
    except ImportError:
        return
    mirage_handoff.resumed()


def finish() -> int:
    """Exit 0 whatever comes next: Python restores the default action of a signal it
    handles while it shuts down, so a USR1 then (Slurm's warning just after the training
    ended) would kill it, and the segment would end FAILED. An ignored signal stays so."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
