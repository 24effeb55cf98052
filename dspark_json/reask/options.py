"""The re-ask stage's options (``repairAttempts``, ``repairMaxTokens``, ``repairTokenBudget``):
whether, how often and at what cost rows with a wrong answer are asked again."""

from __future__ import annotations

from dataclasses import dataclass

from dspark_json.option_spec import number, option, positive

__all__ = ["RepairOptions"]


@dataclass(frozen=True, kw_only=True)
class RepairOptions:
    """Whether, how often and at what cost rows with a wrong answer are asked again."""

    repair_attempts: int = option(
        "repairAttempts",
        "Re-asks per row whose answer is truncated, not_json, corrupt_content or (with "
        "validateSchema) breaks the schema: truncated ones with max_tokens doubled, the others "
        "with the answer and what was wrong with it added to the conversation. 0: none (a "
        "re-ask costs tokens). Column _attempts shows each attempt; never re-asked: "
        "http_error, invalid_prompt, invalid_utf8, corrupt_envelope, empty, refusals.",
        "2",
        convert=number(int, low=0, high=10),
        default="0",
    )
    repair_max_tokens: int | None = option(
        "repairMaxTokens",
        "The most max_tokens a re-ask of a truncated answer asks for (doubling from maxTokens "
        "or the row's own). Never more than the model's context leaves after the prompt, "
        "where the server lists it (vLLM's max_model_len). Default: no other cap.",
        "2048",
        convert=positive(int),
    )
    repair_token_budget: int | None = option(
        "repairTokenBudget",
        "The most tokens (prompt + completion) the re-asks of one micro-batch may spend, all "
        "its tasks together (a batch read is one micro-batch): at planning each task gets a "
        "share in proportion to its rows, rounded down, what the rounding leaves going to the "
        "first task; a task sends a re-ask while the tokens it spent plus the re-ask's price "
        "(its prompt, and the mean completion of the task's answers so far) stay within its "
        "share. An answer without usage is counted at ~4 bytes a token. Identical "
        "deterministic re-asks are sent and paid once. Past it, rows stay as answered and the "
        "metrics say so (repair.budget: the task's share; repair.over_budget: the rows not "
        "re-asked; repair.spent_tokens, repair.estimated_tokens). In generate(), where no "
        "micro-batch is planned, each Arrow batch of a task has the whole budget. Default: no cap.",
        "200000",
        convert=positive(int),
    )
