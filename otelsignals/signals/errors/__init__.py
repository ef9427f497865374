"""Classify a failed tool call or model call into a leaf type of SPEC §3, model-free.

The error texts, exception type names and error codes are data (``phrases/errors.yaml``, loaded
once by :mod:`~otelsignals.signals.errors.library`). :func:`classify_failure` gathers the evidence a
span gives (:mod:`~otelsignals.signals.errors.evidence`) and runs the evidence rules of
:data:`~otelsignals.signals.errors.rules.RULES` in order; the first rule that decides names the leaf,
and its name is the classification's ``rule`` (the signal instance's ``metadata.rule``):

1. **HTTP status** — ``http_status`` (the span's ``http.response.status_code``), ``body_status`` (a
   status in a JSON error body, ``{"error": {"code": 403}}``), ``exception_status`` (the status an
   SDK exception class stands for, ``openai.RateLimitError`` → 429), ``text_status`` (one written in
   the error text, "Error code: 429 - …"): the first of these sources that has a status; a span
   status below 400 hides the others and no status rule fires.

   - 429 and 402 → ``rate_limit`` (a 429 is never an execution failure);
   - 401 / 403 → ``auth_misuse`` for a tool, except when the body names a rate limit or quota
     (GitHub's secondary rate limit and Google's ``rateLimitExceeded`` come back as 403) →
     ``rate_limit``;
   - 408 and 504 → ``timeout``; every other 5xx → ``api_error``;
   - 409 / 412 / 423 / 428 → ``state_error``;
   - 400, 404, 405, 410, 413, 414, 415, 422 and the other 4xx say only "the request was wrong": the
     error codes and text below may name the agent-side leaf (``context_overflow``, ``rate_limit``,
     ``tool_not_found``, ``auth_misuse``, ``state_error``, ``invalid_args``, ``bad_query``); without
     one, 400/405/413/414/415/422 → ``invalid_args``, other 4xx → ``invalid_args`` at low confidence,
     and 404/410 → ``bad_query`` (the agent asked for a record, file or page that is not there)
     unless the text names the *tool, function, endpoint, route or method* as missing, which is
     ``tool_not_found``. A 404/410 only refines to ``tool_not_found`` or ``bad_query``.
2. **Exception type names and error codes** (``error.type`` / ``exception.type``, else the exception
   a Python traceback ends with; the ``code``, ``type``, ``status`` and ``reason`` fields of a JSON
   error body): exact lookup, also of the last dotted part of the name (``httpx.ReadTimeout`` →
   ``ReadTimeout``). ``ambiguous_exception``: names with two meanings (``ValidationError``,
   ``JSONDecodeError``) take the text's side between their alternatives (a pydantic
   ``ValidationError`` for ``WeatherResponse`` is a malformed response; for the tool's arguments
   it is ``invalid_args``). ``exception_type``: a name of the library. ``error_code``: a code of
   the body, the most specific group first. Builtins that say little (``KeyError``, ``TypeError``,
   ``ValueError``) are *weak*: they wait until after the text (``weak_exception_type``).
3. **Message text** — ``text_phrase`` (the exception message, the messages of a JSON error body, or
   the raw content; of a Python traceback only its last line): one pyahocorasick automaton over the
   normalised text (lower case, every run of non-word characters one space, so matches fall on word
   boundaries; linear time, no regex backtracking). A few phrases count only right after a subject
   ("Tool get_wether not found", "Route POST:/v1/x not found", "Timeout 30000ms exceeded": at most
   one whitespace-separated word between; "call get_order_details first": at most three) or right
   after the called tool's own name; a subject word ending a business noun of the YAML's
   ``compounds`` is none ("Payment method 'pm_1' not found" is a missing record: bad_query). A
   field name after "require(s)" / "missing" / "provide" ("Delivery orders require delivery_info")
   is ``invalid_args`` for a missing field. Phrases marked *strong* (they name the arguments or the
   response) beat ordinary ones; among equals the group earliest in ``PRIORITY`` wins (most specific
   first: context_overflow, rate_limit, timeout, network, tool_not_found, auth_misuse, state_error,
   malformed_response, invalid_args, bad_query, api_error), then the longest phrase. Then
   ``weak_exception_type`` (a weak builtin ``error.type``), then ``exception_in_text`` (a builtin
   exception name in the text, or a bare Python KeyError, "Error: 'method_type'": ``invalid_args``
   for a missing field).
4. **Default** — ``unclassified``. A failed tool call none of the above explains is ``invalid_args``
   at confidence 0.5, pattern and reason ``unclassified``: a tool that ran and answered with an error
   refused the call as it was made; with no evidence about the outside world (no status, no
   exception, no known wording) the call's inputs are the first suspect, and the failure stays in
   the agent-caused layer rather than blaming the environment. So every failed tool result yields
   a signal. The one exception, checked before any rule: a cancelled or interrupted call
   (``CancelledError``, ``KeyboardInterrupt``…, the YAML's ``ignored_exception_types``) is nobody's
   failure and classifies to nothing at all.

**Reasons.** Every classification carries ``reason``, why the call was refused. Business-rule
rejections and the other common refusals are named in the YAML's ``reasons`` (state_error:
``insufficient_funds``, ``capacity``, ``wrong_state``, ``not_eligible``, ``precondition``;
invalid_args: ``missing_field``, ``unexpected_field``, ``wrong_type``, ``invalid_value``,
``amount_mismatch``; bad_query: ``not_found``, ``query_syntax``, ``no_results``). The reason is
that of the deciding phrase, else of the best other reason phrase of the same group in the text (a
409 saying "insufficient funds" is state_error for ``insufficient_funds``), else what decided:
the group's own name (an ordinary phrase), ``http_status``, ``exception``, ``error_code``, or
``unclassified`` (the default above, and an unexplained failed model call).

A model call (``source="llm_call"``) has no execution layer: a leaf of the execution layer becomes
``api_error``, 413 is ``context_overflow``, and a failed call with no usable evidence is
``api_error`` at low confidence (its existing default; the tool default above does not apply).

Confidence: HTTP status or exception type / error code → 0.95 (a generic 4xx refined by text →
0.9; 400/405/413/414/415/422 → invalid_args by default → 0.9; 404 → bad_query by default → 0.75;
any other 4xx by default → 0.6; a status read from the error text → 0.9); a message-text match →
0.8; a weak builtin exception alone (or a bare KeyError) → 0.75; an unexplained failed tool or
model call → 0.5.

A successful tool result is never classified: :func:`tool_failure` only looks at results whose span
failed (``ToolResult.is_error``, or the HTTP status ≥ 400 / error type it derives from) or whose
content is unmistakably an error payload (:func:`content_is_error`: a JSON object with a truthy
top-level ``"error"``/``"errors"`` or ``"status": "error"``, or text starting with ``Error:``,
``Exception:`` or ``Traceback``, but not a report's "error: 0" / "Error: none"), so a log search that
returns lines saying "timeout" fires nothing.
"""

from otelsignals.signals.errors.classify import Classification, classify_failure, result_failed, tool_failure
from otelsignals.signals.errors.library import LEAF_OF_GROUP, PHRASES_FILE, library, load_library, normalise
from otelsignals.signals.errors.payload import content_is_error, empty_result_of, error_payload_of, word_forms
from otelsignals.signals.errors.rules import RULES, Rule
from otelsignals.signals.errors.selftest import classify_example, self_test

__all__ = [
    "LEAF_OF_GROUP",
    "PHRASES_FILE",
    "RULES",
    "Classification",
    "Rule",
    "classify_example",
    "classify_failure",
    "content_is_error",
    "empty_result_of",
    "error_payload_of",
    "library",
    "load_library",
    "normalise",
    "result_failed",
    "self_test",
    "tool_failure",
    "word_forms",
]
