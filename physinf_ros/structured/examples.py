"""The robot schemas of config/robot_schemas.yaml and the prompt that asks for each."""

import json
from typing import Dict, List

import yaml

from ..resources import config_path


def robot_schemas() -> List[Dict]:
    """Return the robot schemas: name, schema and one valid example reply each."""
    return yaml.safe_load(config_path('robot_schemas.yaml').read_text())


def schema_prompt(entry: Dict) -> str:
    """Return the user turn that asks for a reply following entry's schema."""
    return (f'Answer with one JSON object following this JSON schema: '
            f'{json.dumps(entry["schema"])}\nTask: {entry["name"].replace("_", " ")}.')
