"""`vit-explorer train`: train a model from a preset on a dataset, with a progress bar, and save
it as a native checkpoint folder. Under torchrun it trains on every process with DDP."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from ..models.config import POS_EMBEDS, STEMS
from ..training.recipe import ATTENTION_INIT, AUGMENT, COMPILE, PRECISION
from . import Render

RECIPE_FLAGS = (  # command-line flags that set the Recipe field of the same name (only when given)
    "steps", "epochs", "time_budget", "batch_size", "lr", "seed", "warmup", "weight_decay", "label_smoothing",
    "grad_clip", "compile", "precision", "task", "mask_ratio", "distill", "teacher", "teacher_steps", "distill_alpha",
    "distill_tau", "checkpoint_every", "attention_init", "augment",
)


def add_arguments(parser: argparse.ArgumentParser, name: str) -> None:
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
    parser.add_argument("--batch-size", type=int, help="global batch size (default 32)")
    parser.add_argument("--lr", type=float, help="peak learning rate (default 1.5e-3)")
    parser.add_argument("--warmup", type=float, help="warm-up fraction of the run (default 0.2)")
    parser.add_argument("--weight-decay", type=float)
    parser.add_argument("--label-smoothing", type=float)
    parser.add_argument("--grad-clip", type=float, help="max gradient norm, 0 = off (default 1)")
    parser.add_argument("--pos-embed", choices=POS_EMBEDS, help="position embedding (overrides the preset)")
    parser.add_argument("--stem", choices=STEMS, help="stem (overrides the preset)")
    parser.add_argument("--image-size", type=int, help="input size (default: the preset's)")
    parser.add_argument("--follow-links", action="store_true",
                        help="image folder: read linked class folders and images that lie outside the dataset "
                             "folder (refused by default)")
    parser.add_argument("--train-size", type=int, help="built-in dataset: training images (default 20000)")
    parser.add_argument("--val-size", type=int, help="built-in dataset: validation images (default 2000)")
    parser.add_argument("--seed", type=int, help="seed for the model, the data order and the built-in data")
    parser.add_argument("--augment", choices=AUGMENT,
                        help="random crops and flips of the training images (default auto: none for the built-in "
                             "sets, crop+flip for CIFAR and image folders; crop for images a flip changes)")
    parser.add_argument("--attention-init", choices=ATTENTION_INIT,
                        help="start attention 'mimetic' (near the identity, as trained ViTs are: learns in far "
                             "fewer steps; default) or from the model's own random 'model' init")
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
    parser.add_argument("--compile", nargs="?", const="default", choices=COMPILE, metavar="MODE",
                        help="torch.compile the model: --compile alone, or a mode (reduce-overhead: CUDA graphs), "
                             "or off (default auto: compiled on a CUDA GPU when the run is long enough to repay it)")
    parser.add_argument("--precision", choices=PRECISION,
                        help="bf16 autocast or fp32 (default auto: bf16 on a CUDA GPU, fp32 on the CPU)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: the GPU if there is one)")
    parser.add_argument("--threads", type=_threads, metavar="N|auto",
                        help="CPU threads to train on: a number, or auto to measure a few steps at 1-4 threads and "
                             "take the fastest (default auto on a CPU, 1 per process under torchrun, or "
                             "VIT_EXPLORER_THREADS)")
    parser.add_argument("--no-state", action="store_true",
                        help="write only the model (no training_state.pt, so no --resume): for shipping")
    parser.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    parser.add_argument("--overwrite", action="store_true", help="replace a run already saved in --out")
    _one_line_errors(parser)


def _threads(value: str) -> str:
    """--threads as given, once it parses (a number from 1, or auto)."""
    from ..training.threads import ThreadsError, parse

    try:
        parse(value)
    except ThreadsError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def _one_line_errors(parser: argparse.ArgumentParser) -> None:
    """A mistyped flag gets one line that names it (exit code 2), not the usage of thirty flags above it."""
    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message}\n")

    parser.error = error  # type: ignore[method-assign]


def setup_distributed() -> bool:
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


def _flag(field: str) -> str:
    return f"--{field.replace('_', '-')}"


def build(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(config, data, recipe) from the arguments, or from the saved run with --resume; every check that
    needs no data runs before the data are loaded. Errors name the flag (or the file) and the problem."""
    from ..checkpoints.devices import resolve_device
    from ..data.datasets import DataError
    from ..training.recipe import RecipeError

    try:
        dev = resolve_device(args.device, default="auto", use="train")
    except ValueError as error:
        raise ValueError(f"argument --device: {error}") from None
    try:
        return _resumed(args, dev) if args.resume else _fresh(args, dev)
    except (RecipeError, DataError) as error:
        raise ValueError(f"{_flag(error.field)} {error.problem}") from None


def _resumed(args: argparse.Namespace, dev: Any) -> tuple[Any, Any, Any]:
    from ..data.datasets import load_data
    from ..training.memory import check_training_memory
    from ..training.state import read_state

    given = [_flag(flag) for flag in RECIPE_FLAGS if getattr(args, flag) not in (None, False)]
    given += [_flag(name) for name in ("pos_embed", "stem", "image_size", "init", "train_size", "val_size")
              if getattr(args, name) is not None] + ["--follow-links"] * args.follow_links
    if given:
        raise ValueError(f"--resume continues the run saved in {args.out} with its own settings; "
                         f"drop {' '.join(given)}")
    state = read_state(Path(args.out))
    check_training_memory(state.config, max(1, state.recipe.batch_size // _world()), dev)
    try:
        data = load_data(**state.data)
    except ValueError as error:
        raise state.fail("data", f"names data that cannot be loaded: {error}") from None
    return state.config, data, state.recipe


def _fresh(args: argparse.Namespace, dev: Any) -> tuple[Any, Any, Any]:
    from ..data.datasets import load_data
    from ..models import ConfigError
    from ..training.memory import check_training_memory
    from ..training.recipe import Recipe

    check_out(args)
    values = {flag: getattr(args, flag) for flag in RECIPE_FLAGS if getattr(args, flag) is not None}
    if args.no_state:
        values["save_state"] = False
    recipe = Recipe(**values)
    try:
        config = _config(args, recipe)
    except ConfigError as error:
        given = [name for name in ("image_size", "pos_embed", "stem") if getattr(args, name) is not None]
        model_flags = [f"--preset {args.preset}"] + [f"{_flag(name)} {getattr(args, name)}" for name in given]
        raise ValueError(f"{' '.join(model_flags)}: {error}") from None
    check_training_memory(config, max(1, recipe.batch_size // _world()), dev)
    sizes = {k: getattr(args, k) for k in ("train_size", "val_size") if getattr(args, k) is not None}
    data = load_data(args.dataset, image_size=config.image_size, seed=recipe.seed, follow_links=args.follow_links,
                     **sizes)
    return config.replace(num_classes=data.num_classes), data, recipe


def check_out(args: argparse.Namespace) -> None:
    """Refuse an --out a new run must not write to: a file, or a folder holding a run (without --overwrite)."""
    from ..checkpoints.native import CONFIG_NAME
    from ..training.state import STATE_NAME

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: is a file, not a folder; choose another --out")
    if not args.overwrite and ((out / CONFIG_NAME).exists() or (out / STATE_NAME).exists()):
        raise ValueError(f"{out}: already holds a trained model; continue it with --resume, "
                         "replace it with --overwrite, or choose another --out")


def _config(args: argparse.Namespace, recipe: Any) -> Any:
    """The model config: the preset (or --init's checkpoint's) with the flags' overrides."""
    from ..models.presets import preset

    overrides: dict[str, Any] = {}
    for name in ("pos_embed", "stem"):
        if getattr(args, name):
            overrides[name] = getattr(args, name)
    if args.image_size is not None:
        overrides["image_size"] = args.image_size
    if recipe.distill:
        overrides["prefix_tokens"] = "cls+dist"
    if recipe.task == "mpp":
        overrides["mask_token"] = True
    if args.init:
        from ..checkpoints import load

        return load(args.init, device="cpu").config.replace(**overrides)
    return preset(args.preset, **overrides)


def _world() -> int:
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


@contextlib.contextmanager
def _hold(out: Path, rank: int, distributed: bool) -> Iterator[None]:
    """The output folder held for this run (checkpoint.hold_folder). Under torchrun rank 0 takes the lock and tells
    every rank whether it got it: a run refused (another holds the folder) ends on every rank at once, where the
    other ranks would otherwise train on, or wait for rank 0 for good."""
    from ..training.checkpoint import hold_folder

    if not distributed:
        with hold_folder(out):
            yield
        return
    import torch.distributed as dist

    with contextlib.ExitStack() as stack:
        problem = [""]
        if rank == 0:
            try:
                stack.enter_context(hold_folder(out))
            except ValueError as error:
                problem = [str(error)]
        dist.broadcast_object_list(problem, src=0)
        if problem[0]:
            raise ValueError(problem[0])
        yield


def run(args: argparse.Namespace, render: Render | None) -> int:
    distributed = setup_distributed()
    rank = int(os.environ.get("RANK", "0")) if distributed else 0
    try:
        config, data, recipe = build(args)
        with _hold(Path(args.out), rank, distributed):
            if not args.resume:
                check_out(args)  # again, now that no other run can write: one may have finished meanwhile
            return _train(args, config, data, recipe, rank)
    finally:
        if distributed:
            import torch.distributed as dist

            dist.destroy_process_group()


def _train(args: argparse.Namespace, config: Any, data: Any, recipe: Any, rank: int) -> int:
    """Run the trainer, showing its events; the exit code."""
    from ..checkpoints.devices import resolve_device
    from ..training import threads
    from ..training.events import Control
    from ..training.trainer import train

    printer = _Printer(args, len(data.train), quiet=rank != 0)
    for note in data.notes:
        printer.say(f"note: {note}")
    one = _world() == 1  # one process: measured; each of several (torchrun) takes one thread
    choice = threads.choose(getattr(args, "threads", None), config, max(1, recipe.batch_size // _world()),
                            resolve_device(args.device, default="auto", use="train"),
                            default="auto" if one else threads.DEFAULT)
    threads.apply(choice)
    if choice.reason:
        printer.say(choice.reason)
    control = Control()

    def on_sigint(signum: int, frame: Any) -> None:
        if control.stopped:  # a second Ctrl+C: stop now, keep the last checkpoint
            raise KeyboardInterrupt
        printer.say("\nstopping after this step and saving a checkpoint (Ctrl+C again to quit at once)",
                    file=sys.stderr)
        control.stop()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        for event in train(config, data, recipe, args.out, resume=args.resume, init=args.init, control=control,
                           device=args.device):
            printer.show(event)
    finally:
        signal.signal(signal.SIGINT, previous)
        printer.close()
    return printer.code


class _Printer:
    """Shows the trainer's events: a progress bar, validation lines, notes and errors (rank 0 only)."""

    def __init__(self, args: argparse.Namespace, train_images: int, quiet: bool) -> None:
        self.name = args.preset if not args.resume else "saved run"
        self.train_images = train_images
        self.quiet = quiet
        self.bar: Any = None
        self.unit = "step"  # the bar's unit, kept here: a bar disabled by TQDM_DISABLE has no `unit`
        self.code = 0  # 1 once training stopped on an error (NaN loss, out of memory, a full disk)

    def say(self, message: str, file: Any = None) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(message, file=file)
        else:
            print(message, file=file)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def show(self, event: Any) -> None:
        from tqdm import tqdm

        from ..training.events import Error, Finished, Notice, Started, Step, Validation

        if self.quiet:
            return
        if isinstance(event, Started):
            self.unit = "s" if event.total_steps is None else "step"
            total = event.time_budget if event.total_steps is None else event.total_steps
            self.say(f"training {self.name}: {event.num_parameters:,} parameters on {event.device} "
                     f"x{event.world_size}, {self.train_images:,} training images, {event.steps_per_epoch} steps "
                     "per epoch")
            initial = 0 if event.total_steps is None else event.start_step
            self.bar = tqdm(total=total, initial=initial, unit=self.unit, dynamic_ncols=True)
        elif isinstance(event, Step) and self.bar is not None:
            # a timed run's bar counts seconds of training, a sized one steps
            self.bar.update((round(event.elapsed_s, 1) if self.unit == "s" else event.step) - self.bar.n)
            self.bar.set_postfix_str(f"loss {event.loss:.3f} acc {event.accuracy:.1%} lr {event.lr:.2e} "
                                     f"{event.images_per_s:.0f} img/s")
        elif isinstance(event, Validation):
            self.say(f"step {event.step}: validation loss {event.loss:.4f}, accuracy {event.accuracy:.2%}")
        elif isinstance(event, Notice):
            self.say(f"note: {event.message}")
        elif isinstance(event, Error):
            self.say(f"vit-explorer train: error: {event.message}", sys.stderr)
            self.code = 1
        elif isinstance(event, Finished):
            self.close()
            acc = f"{event.val_accuracy:.2%}" if event.val_accuracy is not None else "n/a"
            self.say(f"finished ({event.reason}) after {event.step} steps, {event.elapsed_s:.1f} s of training: "
                     f"validation accuracy {acc}" + (f", loss {event.val_loss:.4f}" if event.val_loss else ""))
            if event.path is not None:
                self.say(f"saved to {event.path} (open it with: vit-explorer {event.path})")
