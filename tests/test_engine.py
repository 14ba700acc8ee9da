"""The shared training loop on a job small enough to reason about: a linear model fitting y = 3x.

These pin the loop's contract for every job: the schedule reaches every group, micro-batches add up to the
big batch, evaluations pick best/ in either direction, early stopping, divergence stops before saving, a
signal ends the run with a resumable last/, and a time budget ends it on time.
"""

import json
import math
import os
import signal

import pytest
import torch
from torch import nn

from nanobert.engine.loop import PRE_DECAY, Job, Plan, fit
from nanobert.engine.optimizer import build_optimizer, lr_multiplier
from nanobert.engine.run_log import RunLog, read_records
from nanobert.engine.run_state import RunState
from nanobert.errors import NanobertError


class Feeder:
    """Batches of x in [0, 1) with y = 3x; the position is the number of batches handed out."""

    def __init__(self, batch_size: int = 4, seed: int = 0):
        self.generator = torch.Generator().manual_seed(seed)
        self.batch_size, self.index = batch_size, 0

    def next(self):
        x = torch.rand(self.batch_size, 1, generator=self.generator)
        self.index += 1
        return {"x": x, "y": 3 * x}, {"index": self.index}

    def close(self):
        pass


def mse(model, batch):
    return {"loss": ((model(batch["x"]) - batch["y"]) ** 2).mean()}


def make_job(tmp_path, metric_values=None, higher_is_better=False, batch_size=4, loss=mse, lr=0.1):
    torch.manual_seed(0)
    model = nn.Linear(1, 1)
    model.config = None  # optim reads config.num_hidden_layers when present
    saves = []
    values = iter(metric_values or [])

    def evaluate():
        x = torch.linspace(0, 1, 5)[:, None]
        with torch.no_grad():
            error = float(((model(x) - 3 * x) ** 2).mean())
        return {"error": next(values, error)}

    def save(name, run, state):
        saves.append((name, run.step, state is not None))
        return tmp_path / name

    job = Job(
        model=model,
        train_model=model,
        optimizer=build_optimizer(model, lr, 0.0),
        feeder=Feeder(batch_size),
        data_state={"index": 0},
        loss=loss,
        evaluate=evaluate,
        save=save,
        device=torch.device("cpu"),
        metric="error",
        higher_is_better=higher_is_better,
    )
    return job, saves


def run_fit(tmp_path, job, **plan):
    plan = Plan(**{"learning_rate": 0.1, "warmup_ratio": 0.0, "log_interval": 1, "eval_interval": 5, **plan})
    run = RunState()
    outcome = fit(job, plan, run, RunLog(tmp_path, plan.total_steps, 0, quiet=True))
    return outcome, run, read_records(tmp_path / "metrics.jsonl")


def test_the_loop_learns_logs_every_step_and_evaluates_on_schedule(tmp_path):
    job, saves = make_job(tmp_path)
    told: list[float] = []  # the data's schedule hears the learning rate's clock before each step
    job.on_progress = told.append
    outcome, run, records = run_fit(tmp_path, job, total_steps=60, warmup_ratio=0.1, learning_rate=0.3)
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 61))
    assert told == [step / 60 for step in range(1, 61)]
    assert [r["step"] for r in records if r["split"] == "valid"] == list(range(5, 61, 5))
    assert train[-1]["loss"] < 0.05 * train[0]["loss"]  # it learned y = 3x
    for r in train:  # the schedule of the plan, step by step
        assert r["lr"] == pytest.approx(0.3 * lr_multiplier(r["step"] / 60, 0.1))
    assert (
        outcome.stop_reason == "finished"
        and run.step == 60
        and {"step": 60, **outcome.final} == run.history[-1]
    )
    assert outcome.data_state == {"index": 60}
    assert saves[-1] == ("last", 60, True) and ("best", run.best_step, True) in saves


def test_micro_batches_add_up_to_the_big_batch(tmp_path):
    """Two micro-batches of 4 give the same update as one batch of 8 when the loss is a mean."""
    results = []
    for batch_size, accum in ((8, 1), (4, 2)):
        job, _ = make_job(tmp_path / f"b{batch_size}", batch_size=batch_size)
        (tmp_path / f"b{batch_size}").mkdir()
        if accum == 2:  # the same 8 examples, handed out as two halves
            big = Feeder(8)

            def halves(big=big, pending=[]):  # noqa: B006 - state across calls
                if not pending:
                    batch, _ = big.next()
                    pending.extend(
                        [{k: v[:4] for k, v in batch.items()}, {k: v[4:] for k, v in batch.items()}]
                    )
                return pending.pop(0), {}

            job.feeder.next = halves
        run_fit(tmp_path / f"b{batch_size}", job, total_steps=5, grad_accum_steps=accum, eval_interval=100)
        results.append(torch.cat([p.detach().flatten() for p in job.model.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-6)


@pytest.mark.parametrize("higher_is_better, best_step", [(False, 10), (True, 15)])
def test_best_follows_the_metric_in_its_direction(tmp_path, higher_is_better, best_step):
    job, saves = make_job(tmp_path, [0.5, 0.2, 0.9, 0.3], higher_is_better)
    _, run, _ = run_fit(tmp_path, job, total_steps=20)
    assert run.best_step == best_step
    assert [s for s in saves if s[0] == "best"][-1][1] == best_step


@pytest.mark.parametrize(
    "higher_is_better, values, margin, best_step",
    [
        # within the margin of the best so far, a later evaluation takes best/
        (True, [0.30, 0.32, 0.315, 0.318, 0.30], 0.006, 20),
        # the reference stays the best seen: 0.315 then 0.31 then 0.305 each trail the last by 0.005, but
        # 0.31 and 0.305 trail 0.32 by 0.01 or more, so best/ does not walk downhill
        (True, [0.32, 0.315, 0.31, 0.305], 0.006, 10),
        (False, [5.0, 4.8, 4.85, 4.9, 4.78], 0.1, 25),
        (False, [5.0, 4.8, 4.85, 4.95], 0.1, 15),
        (True, [0.3, 0.3, 0.29], 0.0, 5),  # no margin: the first of equals, as before
    ],
)
def test_a_margin_lets_a_later_evaluation_within_it_take_best(
    tmp_path, higher_is_better, values, margin, best_step
):
    job, saves = make_job(tmp_path, values, higher_is_better)
    job.best_margin = margin
    _, run, _ = run_fit(tmp_path, job, total_steps=5 * len(values))
    best_seen = max(values) if higher_is_better else min(values)
    assert (run.best_step, run.best_value) == (best_step, best_seen)
    assert [s for s in saves if s[0] == "best"][-1][1] == best_step
    replayed = RunState(history=list(run.history))  # a resume finds the same best/ from the history
    replayed.choose_best("error", higher_is_better, margin)
    assert (replayed.best_step, replayed.best_value, replayed.evals_since_best) == (
        run.best_step,
        run.best_value,
        run.evals_since_best,
    )


@pytest.mark.parametrize(
    "history, margin, best_step, why",
    [
        # the toy demo: MLM accuracy 1.0 at step 400 and again at 800, where NSP has caught up: the tie goes
        # to the later, lower-loss evaluation
        ([(400, 1.0, 0.224), (800, 1.0, 0.037)], 0.0, 800, "ties the best (1.0000)"),
        # a tie with a higher loss keeps the earlier one
        ([(400, 1.0, 0.037), (800, 1.0, 0.224)], 0.0, 400, "the best held-out acc so far"),
        # a near-tie within the margin with a lower loss takes best/; outside the margin it does not
        ([(10, 0.30, 5.0), (20, 0.296, 4.9)], 0.006, 20, "within best_margin 0.006"),
        ([(10, 0.30, 5.0), (20, 0.29, 4.5)], 0.006, 10, "the best held-out acc so far"),
        # the loss to beat is best/'s own, not the lowest seen: 30 beats 20's loss, not 10's
        ([(10, 0.30, 4.0), (20, 0.30, 4.5), (30, 0.30, 4.4)], 0.0, 10, "the best held-out acc so far"),
        ([(10, 0.30, 5.0), (20, 0.31, 4.5), (30, 0.305, 4.4)], 0.006, 30, "than step 20's (4.4000 < 4.5000)"),
    ],
)
def test_ties_and_near_ties_go_to_the_later_lower_loss_evaluation(history, margin, best_step, why):
    run = RunState()
    for step, acc, loss in history:
        run.history.append({"step": step, "acc": acc, "loss": loss})
        run.offer(run.history[-1], "acc", True, margin, tiebreak=lambda m: m["loss"])
    assert run.best_step == best_step and why in run.best_reason, run.best_reason
    assert run.best_value == max(acc for _, acc, _ in history)
    replayed = RunState(history=list(run.history))  # a resume names the same best/ and reason
    replayed.choose_best("acc", True, margin, tiebreak=lambda m: m["loss"])
    assert (replayed.best_step, replayed.best_reason) == (run.best_step, run.best_reason)


def test_early_stopping_after_patience_evaluations_without_a_better_one(tmp_path):
    job, _ = make_job(tmp_path, [0.5, 0.6, 0.7, 0.8, 0.1])
    outcome, run, _ = run_fit(tmp_path, job, total_steps=100, early_stopping_patience=2)
    assert run.step == 15 and outcome.stop_reason.startswith("early stopping")


def test_a_non_finite_loss_stops_before_anything_is_saved(tmp_path):
    def poisoned(model, batch):
        loss = mse(model, batch)["loss"]
        return {"loss": loss * float("nan") if job.feeder.index >= 7 else loss}

    job, saves = make_job(tmp_path, loss=poisoned)
    with pytest.raises(NanobertError, match=r"training diverged at step 7 \(loss nan\)"):
        run_fit(tmp_path, job, total_steps=20, checkpoint_interval=5)
    assert saves == [("best", 5, True), ("last", 5, True)]  # nothing after step 5


def test_a_signal_ends_the_run_with_a_resumable_last(tmp_path):
    def signalling(model, batch):
        if job.feeder.index == 3:
            os.kill(os.getpid(), signal.SIGTERM)  # recorded by the loop, acted on at the next step
        return mse(model, batch)

    job, saves = make_job(tmp_path, loss=signalling)
    previous = signal.getsignal(signal.SIGTERM)
    outcome, run, _ = run_fit(tmp_path, job, total_steps=50)
    assert outcome.signalled and outcome.stop_reason == f"interrupted by signal {int(signal.SIGTERM)}"
    assert run.step == 3 and saves[0] == ("last", 3, True)  # secured first, then the final evaluation
    assert signal.getsignal(signal.SIGTERM) == previous  # the handler is put back


def test_a_time_budget_ends_the_run_and_drives_the_schedule(tmp_path):
    job, _ = make_job(tmp_path)
    outcome, run, records = run_fit(tmp_path, job, time_budget=0.3, eval_interval=10**9)
    assert 0.3 <= run.train_time < 3 and run.step > 0
    lrs = [r["lr"] for r in records if r["split"] == "train"]
    assert lrs == sorted(lrs, reverse=True) and math.isclose(lrs[0], 0.1, rel_tol=0.2)
    assert json.dumps(outcome.final)  # evaluated once at the end
    # log lines every 7 steps: the steps after the last one are logged when the budget ends the run
    (tmp_path / "sparse").mkdir()
    job, _ = make_job(tmp_path / "sparse")
    _, run, records = run_fit(tmp_path / "sparse", job, time_budget=0.3, eval_interval=10**9, log_interval=7)
    assert [r["step"] for r in records if r["split"] == "train"][-1] == run.step


def test_a_stop_between_evaluations_is_evaluated_but_leaves_best_to_the_schedule(tmp_path):
    """--stop-after (or a signal) between evaluations evaluates where it stopped; that evaluation goes to
    the history and to last/, not to best/, unless there is no best/ yet, and a resume's replay of the
    history leaves it out: best/ is then the one of the run resumed to its end."""
    job, saves = make_job(tmp_path, [0.5, 0.2])  # lower is better: the stop's 0.2 would win
    outcome, run, records = run_fit(tmp_path, job, total_steps=20, stop_after=7)
    assert [r["step"] for r in records if r["split"] == "valid"] == [5, 7]
    assert (run.best_step, run.best_value, run.interim_steps, outcome.final) == (5, 0.5, [7], {"error": 0.2})
    assert [s[:2] for s in saves if s[0] == "best"] == [("best", 5)]
    replayed = RunState(history=list(run.history), interim_steps=list(run.interim_steps))
    replayed.choose_best("error", higher_is_better=False)
    assert (replayed.best_step, replayed.best_value, replayed.evals_since_best) == (5, 0.5, 0)

    # No evaluation before the stop: it takes best/, so the run has one; resumed, the next evaluation does.
    job, saves = make_job(tmp_path / "early", [0.5])
    (tmp_path / "early").mkdir()
    _, run, _ = run_fit(tmp_path / "early", job, total_steps=20, stop_after=3)
    best_saves = [s[:2] for s in saves if s[0] == "best"]
    assert (run.best_step, run.interim_steps, best_saves) == (3, [3], [("best", 3)])
    run.choose_best("error", higher_is_better=False)
    assert (run.best_step, run.best_value, run.best_reason) == (None, None, None)

    # The plan's own end is no stop: its evaluation competes as every other does.
    job, saves = make_job(tmp_path / "end", [0.5, 0.2])
    (tmp_path / "end").mkdir()
    _, run, _ = run_fit(tmp_path / "end", job, total_steps=7)
    assert (run.best_step, run.interim_steps) == (7, [])


def test_a_resumed_run_keeps_its_best_by_the_metric_it_now_selects_with():
    """Checkpoints of earlier versions chose best/ by held-out loss; the history has every metric, so the
    best by the job's metric (held-out accuracy now) is found again when the run resumes."""
    run = RunState(step=30, best_value=6.1, best_step=10, history=[])
    run.history = [
        {"step": 10, "mlm_loss": 6.1, "mlm_accuracy": 0.15},
        {"step": 20, "mlm_loss": 6.2, "mlm_accuracy": 0.17},
        {"step": 30, "mlm_loss": 6.3, "mlm_accuracy": 0.16},
    ]
    run.choose_best("mlm_accuracy", higher_is_better=True)
    assert (run.best_value, run.best_step, run.evals_since_best) == (0.17, 20, 1)
    run.choose_best("mlm_loss", higher_is_better=False)
    assert (run.best_value, run.best_step, run.evals_since_best) == (6.1, 10, 2)


def test_the_engine_takes_a_typed_feeder_and_the_feeders_say_they_are_one():
    """`Job.feeder` is a `data.feeder.Feeder`; each class that feeds the loop names it as its base."""
    import typing

    from nanobert.data.feeder import Feeder
    from nanobert.data.labelled import ExampleStream
    from nanobert.data.streams import Prefetcher, Synchronous
    from nanobert.finetuning.adapt import MaskedRows

    assert typing.get_type_hints(Job)["feeder"] is Feeder
    for feeder in (Prefetcher, Synchronous, ExampleStream, MaskedRows):
        assert Feeder in feeder.__mro__, feeder


def test_a_held_peak_keeps_the_state_before_its_decay(tmp_path):
    """With keep_pre_decay, the loop saves pre-decay/ before the first step below the peak rate: the state
    after the last step at the peak, which names itself as the run's pre-decay. A longer plan from that state
    keeps its own at its own decay; a run resumed inside its decay, a plan without a held peak, or one that
    does not ask, keeps none."""
    job, saves = make_job(tmp_path)
    states = {}

    def save(name, run, state, save=job.save):
        states[name] = state
        return save(name, run, state)

    job.save = save
    hold = dict(decay_ratio=0.3, keep_pre_decay=True, eval_interval=100)
    _, run, records = run_fit(tmp_path, job, total_steps=20, **hold)
    lrs = {r["step"]: r["lr"] for r in records if r["split"] == "train"}
    assert [s for s in saves if s[0] == PRE_DECAY] == [(PRE_DECAY, 14, True)]
    assert all(lrs[step] == 0.1 for step in range(1, 15)) and lrs[15] < 0.1  # 14 / 20 is the decay's start
    pre = states[PRE_DECAY]["run"]
    assert (pre["step"], pre["in_decay"], pre["pre_decay_step"]) == (14, False, 14)
    assert (run.in_decay, run.pre_decay_step) == (True, 14)

    def resumed(name, run, **plan):
        (tmp_path / name).mkdir()
        job, saves = make_job(tmp_path / name)
        plan = Plan(**{"learning_rate": 0.1, "warmup_ratio": 0.0, "log_interval": 1, **plan})
        fit(job, plan, run, RunLog(tmp_path / name, plan.total_steps, run.step, quiet=True))
        return [s for s in saves if s[0] == PRE_DECAY], run

    longer, run = resumed("longer", RunState.from_dict(pre), total_steps=30, **hold)
    assert longer == [(PRE_DECAY, 21, True)] and run.pre_decay_step == 21  # 21 / 30: the new start
    assert resumed("inside", RunState(step=16), total_steps=20, **hold)[0] == []  # 16 / 20: in the decay
    assert resumed("bert", RunState(), total_steps=20, **{**hold, "decay_ratio": 1.0})[0] == []
    assert resumed("unasked", RunState(), total_steps=20, decay_ratio=0.3)[0] == []


def test_a_time_budget_keeps_the_state_where_its_plan_begins_the_decay(tmp_path):
    """A time budget's decay begins at a time, not a step: pre-decay/ is the state after the last step the
    clock put at the peak rate, whatever step that is."""
    job, saves = make_job(tmp_path)
    _, run, records = run_fit(
        tmp_path, job, time_budget=0.3, decay_ratio=0.5, keep_pre_decay=True, eval_interval=10**9
    )
    kept = [s for s in saves if s[0] == PRE_DECAY]
    assert len(kept) == 1 and kept[0][1] == run.pre_decay_step
    lrs = [r["lr"] for r in records if r["split"] == "train"]
    step = run.pre_decay_step
    assert set(lrs[:step]) == {0.1} and lrs[step] < 0.1 and run.in_decay
