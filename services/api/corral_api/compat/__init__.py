"""Compatibility surfaces: adapters that let clients written for other sandbox services drive
Corral unchanged. Each folder translates one client's wire protocol to Corral's own services
(SandboxService, SandboxDataPath); none runs sandboxes itself."""
