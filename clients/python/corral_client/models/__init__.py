"""Contains all the data models used in inputs/outputs"""

from .batch import Batch
from .batch_item import BatchItem
from .batch_page import BatchPage
from .batch_page_verdicts import BatchPageVerdicts
from .batch_request import BatchRequest
from .batch_status import BatchStatus
from .batch_verdicts import BatchVerdicts
from .case_result import CaseResult
from .command_run_result import CommandRunResult
from .command_run_status import CommandRunStatus
from .commit_request import CommitRequest
from .commit_result import CommitResult
from .compile_result import CompileResult
from .create_sandbox_wait_for_type_0 import CreateSandboxWaitForType0
from .created_key import CreatedKey
from .environment import Environment
from .environment_create import EnvironmentCreate
from .environment_layer import EnvironmentLayer
from .environment_layer_kind import EnvironmentLayerKind
from .error_detail import ErrorDetail
from .error_info import ErrorInfo
from .error_response import ErrorResponse
from .exec_request import ExecRequest
from .exec_request_env import ExecRequestEnv
from .exec_request_output_encoding import ExecRequestOutputEncoding
from .exec_request_user import ExecRequestUser
from .exec_result import ExecResult
from .exec_result_encoding import ExecResultEncoding
from .file_info import FileInfo
from .file_info_type import FileInfoType
from .fncall_request import FncallRequest
from .fncall_request_files import FncallRequestFiles
from .fncall_response import FncallResponse
from .get_sandbox_wait_for_type_0 import GetSandboxWaitForType0
from .healthz_response_healthz import HealthzResponseHealthz
from .image_config import ImageConfig
from .image_config_env import ImageConfigEnv
from .image_config_labels import ImageConfigLabels
from .image_import import ImageImport
from .image_import_state import ImageImportState
from .import_failure import ImportFailure
from .import_progress import ImportProgress
from .import_result import ImportResult
from .import_result_timings import ImportResultTimings
from .input_request import InputRequest
from .job import Job
from .job_counts import JobCounts
from .job_create import JobCreate
from .job_create_labels import JobCreateLabels
from .job_labels import JobLabels
from .job_list import JobList
from .key import Key
from .key_create import KeyCreate
from .key_create_role import KeyCreateRole
from .key_list import KeyList
from .key_press import KeyPress
from .layer import Layer
from .layer_kind import LayerKind
from .list_layers_kind_type_0 import ListLayersKindType0
from .list_rollouts_status_type_0 import ListRolloutsStatusType0
from .mouse_click import MouseClick
from .mouse_click_button import MouseClickButton
from .mouse_move import MouseMove
from .network_counters import NetworkCounters
from .network_denial import NetworkDenial
from .network_policy import NetworkPolicy
from .node import Node
from .node_list import NodeList
from .quotas import Quotas
from .requests import Requests
from .rollout import Rollout
from .rollout_create import RolloutCreate
from .rollout_create_metadata import RolloutCreateMetadata
from .rollout_finish import RolloutFinish
from .rollout_finish_info import RolloutFinishInfo
from .rollout_info_type_0 import RolloutInfoType0
from .rollout_list import RolloutList
from .rollout_metadata import RolloutMetadata
from .rollout_status import RolloutStatus
from .rotated_key import RotatedKey
from .run_code_request import RunCodeRequest
from .run_code_request_files import RunCodeRequestFiles
from .run_code_request_language import RunCodeRequestLanguage
from .run_code_response import RunCodeResponse
from .run_code_response_files import RunCodeResponseFiles
from .run_status import RunStatus
from .runtime_info import RuntimeInfo
from .runtime_list import RuntimeList
from .sandbox import Sandbox
from .sandbox_create import SandboxCreate
from .sandbox_create_backend import SandboxCreateBackend
from .sandbox_create_env import SandboxCreateEnv
from .sandbox_create_isolation import SandboxCreateIsolation
from .sandbox_create_labels import SandboxCreateLabels
from .sandbox_labels import SandboxLabels
from .sandbox_list import SandboxList
from .sandbox_network_state import SandboxNetworkState
from .sandbox_runtime import SandboxRuntime
from .sandbox_state import SandboxState
from .send_input_response_send_input import SendInputResponseSendInput
from .snapshot import Snapshot
from .snapshot_list import SnapshotList
from .step import Step
from .step_args import StepArgs
from .step_error import StepError
from .step_observation_type_0 import StepObservationType0
from .step_request import StepRequest
from .step_request_action import StepRequestAction
from .step_request_args import StepRequestArgs
from .step_status import StepStatus
from .storage_usage import StorageUsage
from .swerex_token import SwerexToken
from .tenant import Tenant
from .tenant_create import TenantCreate
from .tenant_detail import TenantDetail
from .tenant_list import TenantList
from .tenant_update import TenantUpdate
from .tenant_usage import TenantUsage
from .tenant_usage_now import TenantUsageNow
from .tenant_usage_totals import TenantUsageTotals
from .test_case import TestCase
from .type_text import TypeText
from .upload_layer_kind import UploadLayerKind
from .usage import Usage
from .verdict import Verdict

__all__ = (
    "Batch",
    "BatchItem",
    "BatchPage",
    "BatchPageVerdicts",
    "BatchRequest",
    "BatchStatus",
    "BatchVerdicts",
    "CaseResult",
    "CommandRunResult",
    "CommandRunStatus",
    "CommitRequest",
    "CommitResult",
    "CompileResult",
    "CreateSandboxWaitForType0",
    "CreatedKey",
    "Environment",
    "EnvironmentCreate",
    "EnvironmentLayer",
    "EnvironmentLayerKind",
    "ErrorDetail",
    "ErrorInfo",
    "ErrorResponse",
    "ExecRequest",
    "ExecRequestEnv",
    "ExecRequestOutputEncoding",
    "ExecRequestUser",
    "ExecResult",
    "ExecResultEncoding",
    "FileInfo",
    "FileInfoType",
    "FncallRequest",
    "FncallRequestFiles",
    "FncallResponse",
    "GetSandboxWaitForType0",
    "HealthzResponseHealthz",
    "ImageConfig",
    "ImageConfigEnv",
    "ImageConfigLabels",
    "ImageImport",
    "ImageImportState",
    "ImportFailure",
    "ImportProgress",
    "ImportResult",
    "ImportResultTimings",
    "InputRequest",
    "Job",
    "JobCounts",
    "JobCreate",
    "JobCreateLabels",
    "JobLabels",
    "JobList",
    "Key",
    "KeyCreate",
    "KeyCreateRole",
    "KeyList",
    "KeyPress",
    "Layer",
    "LayerKind",
    "ListLayersKindType0",
    "ListRolloutsStatusType0",
    "MouseClick",
    "MouseClickButton",
    "MouseMove",
    "NetworkCounters",
    "NetworkDenial",
    "NetworkPolicy",
    "Node",
    "NodeList",
    "Quotas",
    "Requests",
    "Rollout",
    "RolloutCreate",
    "RolloutCreateMetadata",
    "RolloutFinish",
    "RolloutFinishInfo",
    "RolloutInfoType0",
    "RolloutList",
    "RolloutMetadata",
    "RolloutStatus",
    "RotatedKey",
    "RunCodeRequest",
    "RunCodeRequestFiles",
    "RunCodeRequestLanguage",
    "RunCodeResponse",
    "RunCodeResponseFiles",
    "RunStatus",
    "RuntimeInfo",
    "RuntimeList",
    "Sandbox",
    "SandboxCreate",
    "SandboxCreateBackend",
    "SandboxCreateEnv",
    "SandboxCreateIsolation",
    "SandboxCreateLabels",
    "SandboxLabels",
    "SandboxList",
    "SandboxNetworkState",
    "SandboxRuntime",
    "SandboxState",
    "SendInputResponseSendInput",
    "Snapshot",
    "SnapshotList",
    "Step",
    "StepArgs",
    "StepError",
    "StepObservationType0",
    "StepRequest",
    "StepRequestAction",
    "StepRequestArgs",
    "StepStatus",
    "StorageUsage",
    "SwerexToken",
    "Tenant",
    "TenantCreate",
    "TenantDetail",
    "TenantList",
    "TenantUpdate",
    "TenantUsage",
    "TenantUsageNow",
    "TenantUsageTotals",
    "TestCase",
    "TypeText",
    "UploadLayerKind",
    "Usage",
    "Verdict",
)
