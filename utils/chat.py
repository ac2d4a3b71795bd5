"""Chat with SmolLM2-135M from the command line, offline.

    python -m utils.chat "Why is the sky blue?" --max-new-tokens 40
    python -m utils.chat "The capital of France is" --raw --json

Streams the answer, then prints the time to first token (TTFT) and the mean time per output token
(TPOT). --json prints one JSON object instead (prompt_ids, token_ids, text, ttft_seconds,
tpot_seconds, ...); --raw sends the prompt as plain text, without the ChatML chat template.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from utils.cli import Parser
from utils.device import describe, pick_device, to_torch_dtype
from utils.generate import DECODE_MODES, check_decode_mode, generate


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m utils.chat", description=__doc__.split("\n")[0])
    parser.add_argument("prompt", help="the user message (or plain text with --raw)")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=64,
                        help="most tokens to generate (default 64)")
    parser.add_argument("--json", action="store_true", help="print one JSON object, no stream")
    parser.add_argument("--raw", action="store_true", help="no chat template: continue the text")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where to run (default: cuda if present, else cpu)")
    parser.add_argument("--temperature", type=_non_negative_float, default=0.0,
                        help="0 means greedy (default)")
    parser.add_argument("--top-p", type=_non_negative_float, default=1.0,
                        help="nucleus sampling mass, 0 < p <= 1 (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="random seed for sampling")
    parser.add_argument("--mode", choices=list(DECODE_MODES), default="eager",
                        help="how decode steps run (utils.generate.make_decode_step); numpy: "
                             "the same step without PyTorch's overhead, CPU in fp32 only")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 < args.top_p <= 1:
        parser.error(f"argument --top-p: must be in (0, 1], got {args.top_p}")
    if not args.prompt.strip():
        parser.error("the prompt is empty")
    try:
        device = pick_device(None if args.device == "auto" else args.device)
    except ValueError as err:
        parser.error(f"argument --device: {err}")
    try:
        check_decode_mode(args.mode, device, to_torch_dtype(None, device))
    except ValueError as err:
        parser.error(f"argument --mode: {err}")

    from utils.loading import load_model

    start = time.perf_counter()
    model, tokenizer = load_model(device=device)
    load_seconds = time.perf_counter() - start
    prompt_ids = tokenizer.encode(args.prompt) if args.raw else tokenizer.encode_chat(args.prompt)

    def show(token_id: int, text: str) -> None:
        print(text, end="", flush=True)

    try:
        record = generate(model, tokenizer, prompt_ids, max_new_tokens=args.max_new_tokens,
                          temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                          decode_mode=args.mode, on_token=None if args.json else show)
    except ValueError as err:  # e.g. a prompt longer than the model's context
        parser.error(str(err))
    if args.json:
        print(json.dumps({
            "prompt_ids": record.prompt_ids, "token_ids": record.token_ids, "text": record.text,
            "ttft_seconds": record.ttft_seconds, "tpot_seconds": record.tpot_seconds,
            "stop_reason": record.stop_reason, "load_seconds": load_seconds,
            "decode_mode": args.mode,
            **describe(device, model.output.weight.dtype),
        }))
        return 0
    print()
    info = describe(device, model.output.weight.dtype)
    tpot = record.mean_tpot_seconds
    print(f"\n[{info['device']} {info['dtype']}, decode {args.mode}, {len(prompt_ids)} prompt tokens, "
          f"{len(record.token_ids)} generated, load {load_seconds:.2f} s] "
          f"TTFT {record.ttft_seconds * 1e3:.1f} ms, mean TPOT {tpot * 1e3:.1f} ms "
          f"({1 / tpot:.1f} tokens/s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
