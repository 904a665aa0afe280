"""What the apply-mode and leader tests share: an API client of the test's kmock emulator
(each test module's own ``server`` fixture says which resources the emulator serves)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest
from kubernetes_asyncio import client as k8s
from migmanager_sim import api_for


@pytest.fixture()
async def api(server: kmock.KubernetesEmulator) -> AsyncIterator[k8s.ApiClient]:
    client = api_for(server)
    yield client
    await client.close()
