"""portq as a Django 6 ``django.tasks`` backend (``pip install 'portq[django]'``).

::

    INSTALLED_APPS = [..., "portq.contrib.django"]      # management commands
    TASKS = {"default": {"BACKEND": "portq.contrib.django.PortqBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"database": "default", "max_attempts": 5}}}

``my_task.enqueue(...)`` writes the job through Django's own connection of ``database``,
in the open ``transaction.atomic()`` block if there is one: the job commits or rolls back
with the request's writes; ``get_result()`` reads through that connection too.
``manage.py portq_migrate`` creates portq's tables and ``manage.py portq_worker`` runs them.
See :mod:`portq.contrib.django.backend`.
"""

from portq.contrib.django.backend import PortqBackend
from portq.contrib.django.results import load_task
from portq.contrib.django.runner import TaskFailed, TaskFailedPermanently, TaskRunner

__all__ = ["PortqBackend", "TaskFailed", "TaskFailedPermanently", "TaskRunner", "load_task"]
