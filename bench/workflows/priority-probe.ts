// The temporal-priority benchmark's workflow: nothing but one workflow task, so the order in
// which a saturated worker completes a backlog of them is the order Temporal dispatched them.
// Workflow sandbox code: no I/O.
export async function priorityProbe(label: string): Promise<string> {
  return label;
}
