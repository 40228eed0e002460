"""Contains all the data models used in inputs/outputs"""

from .create_sandbox_wait_for_type_0 import CreateSandboxWaitForType0
from .error_detail import ErrorDetail
from .error_info import ErrorInfo
from .error_response import ErrorResponse
from .exec_request import ExecRequest
from .exec_request_env import ExecRequestEnv
from .exec_request_user import ExecRequestUser
from .exec_result import ExecResult
from .file_info import FileInfo
from .file_info_type import FileInfoType
from .get_sandbox_wait_for_type_0 import GetSandboxWaitForType0
from .healthz_response_healthz import HealthzResponseHealthz
from .sandbox import Sandbox
from .sandbox_create import SandboxCreate
from .sandbox_create_backend import SandboxCreateBackend
from .sandbox_create_env import SandboxCreateEnv
from .sandbox_create_labels import SandboxCreateLabels
from .sandbox_labels import SandboxLabels
from .sandbox_list import SandboxList
from .sandbox_state import SandboxState
from .usage import Usage

__all__ = (
    "CreateSandboxWaitForType0",
    "ErrorDetail",
    "ErrorInfo",
    "ErrorResponse",
    "ExecRequest",
    "ExecRequestEnv",
    "ExecRequestUser",
    "ExecResult",
    "FileInfo",
    "FileInfoType",
    "GetSandboxWaitForType0",
    "HealthzResponseHealthz",
    "Sandbox",
    "SandboxCreate",
    "SandboxCreateBackend",
    "SandboxCreateEnv",
    "SandboxCreateLabels",
    "SandboxLabels",
    "SandboxList",
    "SandboxState",
    "Usage",
)
