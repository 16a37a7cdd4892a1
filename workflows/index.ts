// The workflow bundle's entry point: export every workflow function the worker runs.
export { generationWorkflow } from './generation';
export { reconcileWorkflow } from './reconcile';
