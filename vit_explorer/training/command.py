"""`vit-explorer train`: train a model from a preset on a dataset, with a progress bar, and save
it as a native checkpoint folder. Under torchrun it trains on every process with DDP."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from ..models.config import POS_EMBEDS, STEMS

RECIPE_FLAGS = (  # command-line flags that set the Recipe field of the same name (only when given)
    "steps", "epochs", "time_budget", "batch_size", "lr", "seed", "warmup", "weight_decay", "label_smoothing",
    "grad_clip", "compile", "task", "mask_ratio", "distill", "teacher", "teacher_steps", "distill_alpha",
    "distill_tau", "checkpoint_every",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output folder: a native checkpoint vit-explorer opens")
    parser.add_argument("--preset", default="classroom", help="model preset (default: classroom)")
    parser.add_argument("--dataset", default="shapes",
                        help="'shapes' (built in, default), 'where' (built in, position-sensitive), "
                             "a CIFAR-10/100 python folder, or an image folder (one sub-folder per class)")
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=float, help="train for this many epochs")
    length.add_argument("--steps", type=int, help="train for this many optimizer steps")
    length.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="train for this many seconds, the schedule sized to fit (default when no length is "
                             "given: 120)")
    parser.add_argument("--batch-size", type=int, help="global batch size (default 64)")
    parser.add_argument("--lr", type=float, help="peak learning rate (default 1.5e-3)")
    parser.add_argument("--warmup", type=float, help="warm-up fraction of the run (default 0.06)")
    parser.add_argument("--weight-decay", type=float)
    parser.add_argument("--label-smoothing", type=float)
    parser.add_argument("--grad-clip", type=float, help="max gradient norm, 0 = off (default 1)")
    parser.add_argument("--pos-embed", choices=POS_EMBEDS, help="position embedding (overrides the preset)")
    parser.add_argument("--stem", choices=STEMS, help="stem (overrides the preset)")
    parser.add_argument("--image-size", type=int, help="input size (default: the preset's)")
    parser.add_argument("--train-size", type=int, help="built-in dataset: training images (default 20000)")
    parser.add_argument("--val-size", type=int, help="built-in dataset: validation images (default 2000)")
    parser.add_argument("--seed", type=int, help="seed for the model, the data order and the built-in data")
    parser.add_argument("--task", choices=("classify", "mpp"),
                        help="'mpp' pretrains by masked patch prediction (ViT paper); fine-tune with --init")
    parser.add_argument("--mask-ratio", type=float, help="MPP: fraction of patches corrupted (default 0.5)")
    parser.add_argument("--init", help="start from this checkpoint's weights (e.g. an MPP run), head excepted")
    parser.add_argument("--distill", choices=("hard", "soft"), help="DeiT distillation through a distillation token")
    parser.add_argument("--teacher", help="teacher for --distill: a source vit-explorer opens, or 'cnn'")
    parser.add_argument("--teacher-steps", type=int, help="steps to train the 'cnn' teacher (default 400)")
    parser.add_argument("--distill-alpha", type=float, help="soft distillation: weight of the KL term (0.5)")
    parser.add_argument("--distill-tau", type=float, help="soft distillation: temperature (1.0)")
    parser.add_argument("--checkpoint-every", type=float, metavar="SECONDS", help="checkpoint interval (60)")
    parser.add_argument("--compile", action="store_true", default=None, help="torch.compile the model")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: the GPU if there is one)")
    parser.add_argument("--no-state", action="store_true",
                        help="write only the model (no training_state.pt, so no --resume): for shipping")
    parser.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    parser.add_argument("--overwrite", action="store_true", help="replace a run already saved in --out")


def _setup_distributed() -> bool:
    """Join the torchrun process group when launched by torchrun; True if distributed."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch
    import torch.distributed as dist

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    return True


def _build(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(config, data, recipe) from the arguments, or from the saved run with --resume."""
    from ..checkpoints.native import CONFIG_NAME
    from ..data.datasets import load_data
    from ..models import ViTConfig
    from ..models.presets import preset
    from .recipe import Recipe
    from .trainer import STATE_NAME, load_state

    if args.resume:
        given = [f"--{flag.replace('_', '-')}" for flag in RECIPE_FLAGS if getattr(args, flag) not in (None, False)]
        given += [f"--{name.replace('_', '-')}" for name in ("pos_embed", "stem", "image_size", "init")
                  if getattr(args, name)]
        if given:
            raise ValueError(f"--resume continues the run saved in {args.out} with its own settings; "
                             f"drop {' '.join(given)}")
        state = load_state(Path(args.out))
        spec = dict(state["data"])
        recipe = Recipe.from_dict(state["recipe"])
        data = load_data(spec.pop("dataset"), image_size=tuple(spec.pop("image_size")), **spec)
        return ViTConfig.from_dict(state["config"]), data, recipe

    out = Path(args.out)
    if not args.overwrite and ((out / CONFIG_NAME).exists() or (out / STATE_NAME).exists()):
        raise ValueError(f"{out}: already holds a trained model; continue it with --resume, "
                         "replace it with --overwrite, or choose another --out")
    values = {flag: getattr(args, flag) for flag in RECIPE_FLAGS if getattr(args, flag) is not None}
    if args.no_state:
        values["save_state"] = False
    recipe = Recipe(**values)
    overrides: dict[str, Any] = {}
    for name in ("pos_embed", "stem"):
        if getattr(args, name):
            overrides[name] = getattr(args, name)
    if args.image_size:
        overrides["image_size"] = args.image_size
    if recipe.distill:
        overrides["prefix_tokens"] = "cls+dist"
    if recipe.task == "mpp":
        overrides["mask_token"] = True
    if args.init:
        from ..checkpoints import load

        config = load(args.init, device="cpu").config.replace(**overrides)
    else:
        config = preset(args.preset, **overrides)
    sizes = {k: getattr(args, k) for k in ("train_size", "val_size") if getattr(args, k) is not None}
    data = load_data(args.dataset, image_size=config.image_size, seed=recipe.seed, **sizes)
    return config.replace(num_classes=data.num_classes), data, recipe


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .events import Control, Error, Finished, Notice, Started, Step, Validation
    from .trainer import train

    distributed = _setup_distributed()
    rank = int(os.environ.get("RANK", "0")) if distributed else 0
    try:
        config, data, recipe = _build(args)
        say = print if rank == 0 else (lambda *a, **k: None)
        for note in data.notes:
            say(f"note: {note}")
        control = Control()

        def on_sigint(signum: int, frame: Any) -> None:
            if control.stopped:  # a second Ctrl+C: stop now, keep the last checkpoint
                raise KeyboardInterrupt
            say("\nstopping after this step and saving a checkpoint (Ctrl+C again to quit at once)",
                file=sys.stderr)
            control.stop()

        previous = signal.signal(signal.SIGINT, on_sigint)
        bar = None
        code = 0
        try:
            events = train(config, data, recipe, args.out, resume=args.resume, init=args.init, control=control,
                           device=args.device)
            for event in events:
                if rank != 0:
                    continue
                if isinstance(event, Started):
                    unit = "s" if event.total_steps is None else "step"
                    total = event.time_budget if event.total_steps is None else event.total_steps
                    say(f"training {args.preset if not args.resume else 'saved run'}: {event.num_parameters:,} "
                        f"parameters on {event.device} x{event.world_size}, {len(data.train):,} training images, "
                        f"{event.steps_per_epoch} steps per epoch")
                    initial = 0 if event.total_steps is None else event.start_step
                    bar = tqdm(total=total, initial=initial, unit=unit, dynamic_ncols=True)
                elif isinstance(event, Step) and bar is not None:
                    # a timed run's bar counts seconds of training, a sized one steps
                    bar.update((round(event.elapsed_s, 1) if bar.unit == "s" else event.step) - bar.n)
                    bar.set_postfix_str(f"loss {event.loss:.3f} acc {event.accuracy:.1%} lr {event.lr:.2e} "
                                        f"{event.images_per_s:.0f} img/s")
                elif isinstance(event, Validation):
                    _write(bar, f"step {event.step}: validation loss {event.loss:.4f}, accuracy {event.accuracy:.2%}")
                elif isinstance(event, Notice):
                    _write(bar, f"note: {event.message}")
                elif isinstance(event, Error):
                    _write(bar, f"vit-explorer train: error: {event.message}", sys.stderr)
                    code = 1
                elif isinstance(event, Finished):
                    if bar is not None:
                        bar.close()
                        bar = None
                    acc = f"{event.val_accuracy:.2%}" if event.val_accuracy is not None else "n/a"
                    say(f"finished ({event.reason}) after {event.step} steps, {event.elapsed_s:.1f} s of training: "
                        f"validation accuracy {acc}" + (f", loss {event.val_loss:.4f}" if event.val_loss else ""))
                    if event.path is not None:
                        say(f"saved to {event.path} (open it with: vit-explorer {event.path})")
        finally:
            signal.signal(signal.SIGINT, previous)
            if bar is not None:
                bar.close()
        return code
    finally:
        if distributed:
            import torch.distributed as dist

            dist.destroy_process_group()


def _write(bar: Any, message: str, file: Any = None) -> None:
    if bar is not None:
        bar.write(message, file=file)
    else:
        print(message, file=file)
