"""The EC2 (and IAM instance profile) adapter the lifecycle uses, one module per resource family, as the AWS
provider's ``pkg/providers``. boto3 clients are injected; every AWS failure surfaces as a typed error from
``nodeflow.aws.errors``. No module here makes a business decision (which instance type, which zone, when to
retry or to delete): the lifecycle steps do, and import the module of the resource they need.

==========================  ===============================================================================
module                      decides
==========================  ===============================================================================
``node_class``              what an EC2NodeClass resolves to (``resolve_node_class``), whether it is ready,
                            its ``status`` fields; composes the five modules below
``subnets``                 which subnets the selector terms select; one subnet per zone
``security_groups``         which security groups the selector terms select
``amis``                    AMI aliases' SSM parameters, DescribeImages queries, the newest image per arch
``instance_profiles``       the instance profile of a class with ``spec.role``: its name, its only role
``capacity_reservations``   the DescribeCapacityReservations requests of the selector terms
``placement_groups``        the available placement group a ``placementGroupSelector`` names
``launch_template_data``    what a launch template holds and its name (pure)
``launch_templates``        templates made once per configuration, listed by ownership, deleted
``fleet``                   the CreateFleet request of a launch and how its answer reads
``instances``               instances described, listed by the cluster's tags, terminated; status checks
``validation``              the authorization dry runs of the EC2NodeClass ``ValidationSucceeded`` condition
``tags``, ``paging``        ownership tags and selector filters; reading every page
==========================  ===============================================================================

This package file imports nothing: a handler pays only for the modules it uses.

Must not touch: what to launch, keep or delete (the lifecycle steps and the pure code decide); Kubernetes.
"""
