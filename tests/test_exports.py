"""The public surface changes only on purpose: names and error codes are pinned here."""

from __future__ import annotations

import pickle

import weft_actors
import weft_actors.errors as errors

PUBLIC = {
    "ActivityInfo", "AsyncClient", "AsyncClientHandle", "Client", "ClientHandle", "Context",
    "Engine", "EngineOptions", "RetryPolicy", "ScheduleHandle", "WeftError", "WorkflowHandle", "activity", "errors", "register_type", "workflow",
}

CODES = {
    "WeftError": "weft_error",
    "WorkflowNotFound": "workflow_not_found",
    "WorkflowAlreadyExists": "workflow_already_exists",
    "WorkflowFailed": "workflow_failed",
    "WorkflowCancelled": "workflow_cancelled",
    "WorkflowTerminated": "workflow_terminated",
    "WorkflowTimedOut": "workflow_timed_out",
    "WorkflowClosed": "workflow_closed",
    "UnknownWorkflowType": "unknown_workflow_type",
    "UnknownActivity": "unknown_activity",
    "UnknownQuery": "unknown_query",
    "QueryFailed": "query_failed",
    "UpdateRejected": "update_rejected",
    "UpdateFailed": "update_failed",
    "NonDeterminismError": "non_determinism",
    "InvalidAwait": "invalid_await",
    "UserCodeExit": "user_code_exit",
    "ActivityError": "activity_failed",
    "ChildWorkflowError": "child_workflow_failed",
    "PayloadTooLarge": "payload_too_large",
    "SerializationError": "serialization_error",
    "InvalidRequest": "invalid_request",
    "ServerUnavailable": "server_unavailable",
    "OutcomeUnknown": "outcome_unknown",
    "OwnershipModeMismatch": "ownership_mode_mismatch",
    "SchemaVersionError": "schema_version",
    "StorageFull": "storage_full",
    "StorageError": "storage_error",
    "FencedOut": "fenced_out",
    "EngineDeposed": "engine_deposed",
    "EngineStopped": "engine_stopped",
    "WorkflowMoved": "workflow_moved",
    "LimitExceeded": "limit_exceeded",
    "Overloaded": "overloaded",
    "PermissionDenied": "permission_denied",
}


def test_public_names_of_the_package_are_pinned():
    assert set(weft_actors.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(weft_actors, name) is not None


def test_error_classes_and_codes_are_pinned():
    classes = {name for name in errors.__all__ if isinstance(getattr(errors, name), type)}
    assert classes == set(CODES)
    assert {name: getattr(errors, name).code for name in classes} == CODES
    assert set(errors.__all__) - classes == {"error_class", "to_wire", "from_wire"}
    for name in classes:
        assert issubclass(getattr(errors, name), errors.WeftError)


def test_errors_cross_the_wire_and_pickle_as_the_same_class():
    error = errors.WorkflowNotFound("workflow 'x' not found", workflow_id="x")
    again = errors.from_wire(errors.to_wire(error))
    assert type(again) is errors.WorkflowNotFound and again.workflow_id == "x" and str(again) == str(error)
    assert type(pickle.loads(pickle.dumps(error))) is errors.WorkflowNotFound
    assert errors.error_class("no_such_code") is errors.WeftError
