"""A PyTorch training loop that resumes from its last checkpoint and checkpoints on USR1.

Used by train.sbatch. On SIGUSR1 (Slurm's warning before the time limit, or Mirage's
handoff) it finishes the current step, writes a checkpoint atomically and exits 0. When
the planned number of steps is done it writes the completion marker ``DONE`` (the
chain's ``--until-file``).
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

import torch

stop = False


def on_usr1(_signum: int, _frame: object) -> None:
    global stop
    stop = True


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint-dir", type=Path, required=True)
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--every", type=int, default=1000, help="periodic checkpoint interval")
    args = p.parse_args()
    signal.signal(signal.SIGUSR1, on_usr1)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt = args.checkpoint_dir / "last.pt"
    step = 0
    if ckpt.exists():
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        print(f"resumed at step {step}", flush=True)

    def save() -> None:
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
        tmp.replace(ckpt)  # never a half-written checkpoint

    while step < args.steps:
        x = torch.randn(128, 64, device=device)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if stop:
            save()
            print(f"signalled: checkpointed at step {step}, exiting", flush=True)
            return 0
        if step % args.every == 0:
            save()
    save()
    (args.checkpoint_dir / "DONE").write_text(f"{step}\n")
    print("training complete", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
