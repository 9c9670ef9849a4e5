"""When things happen to a held job: when it is released, when its task is polled again,
when nodes come back, and what a loop's step does while its next task waits.

``decide_release`` (``release``) is the one entry point the service asks: the facts of one
tracked task in (``ReleaseFacts``), the decision and its reason out (``ReleaseDecision``).
It puts together the release point of a task with a queue position or an estimated place
(``release_point``), the early release by the classical lead or ``predict``'s start-up, a
loop step's node lead (``step_plan``), and the adaptive poll plan (``poller``). Beside it:
the forecast wait for nodes (``node_wait``) and what a loop's step does after its work
(``step_plan``: keep, release early or give back). Every part decides from the data it is
given: none calls a vendor or Flux, sleeps or reads the clock.
"""

from flux_quantum.timing.node_wait import ClusterQueue as ClusterQueue
from flux_quantum.timing.node_wait import NodeWait as NodeWait
from flux_quantum.timing.node_wait import forecast_node_wait as forecast_node_wait
from flux_quantum.timing.poller import AdaptivePoller as AdaptivePoller
from flux_quantum.timing.poller import Pace as Pace
from flux_quantum.timing.poller import PollSchedule as PollSchedule
from flux_quantum.timing.release import PollFacts as PollFacts
from flux_quantum.timing.release import ReleaseFacts as ReleaseFacts
from flux_quantum.timing.release import Standing as Standing
from flux_quantum.timing.release import StepLead as StepLead
from flux_quantum.timing.release import decide_release as decide_release
from flux_quantum.timing.release_point import AT_END as AT_END
from flux_quantum.timing.release_point import Backlog as Backlog
from flux_quantum.timing.release_point import ReleaseDecision as ReleaseDecision
from flux_quantum.timing.step_plan import StepAction as StepAction
from flux_quantum.timing.step_plan import StepPlan as StepPlan
from flux_quantum.timing.step_plan import lead_quantile as lead_quantile
from flux_quantum.timing.step_plan import plan_step as plan_step
from flux_quantum.timing.step_plan import step_of as step_of
