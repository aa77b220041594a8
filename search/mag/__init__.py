"""MAG (multimodal action and guide generation) on WebArena, searched with a PRM: the run and its
CLI (``search.mag.run``, ``python -m search.mag``), the agent and its policy prompt
(``search.mag.agent``), the step contract, OFCR and guide metrics (``search.mag.metrics``), and the
Set-of-Mark observation and executor (``search.mag.som``).

    from search.mag import check_step          # OFCR of one output (App. D)
    from search.mag import MAG, MagSearch      # the benchmark and its config (search.runner)
"""

from search.mag.metrics import check_step
from search.mag.run import (
                            MAG,
                            MagSearch,
                            SetupError,
                            build_parser,
                            episode_row,
                            gold_task_ids,
                            load_task_configs,
                            main,
                            run_name,
                            summarize_run,
                            table,
)

__all__ = ["MAG", "MagSearch", "SetupError", "build_parser", "check_step", "episode_row", "gold_task_ids",
           "load_task_configs", "main", "run_name", "summarize_run", "table"]
