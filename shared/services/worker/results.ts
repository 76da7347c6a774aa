import {
  type ForwardBackwardResult,
  type OptimStepResult,
  type SampleRun,
  toSampleResult,
} from '../../backend/backend.js';
import { type TensorJson, tensorToJson } from '../../backend/tensor.js';

/**
 * The result JSON of each request type, as the Tinker SDK parses it. Results are stored as their JSON
 * text (shared/services/worker/outputs.ts), inline or in S3 alike, so both read back as the same value.
 */

export function createModelResult(modelId: string) {
  return { model_id: modelId, type: 'create_model' as const };
}

/** The backend's typed outputs as the SDK's JSON `TensorData` (`{data, dtype, shape}`, dense). */
export function passResult(result: ForwardBackwardResult) {
  return {
    loss_fn_output_type: result.loss_fn_output_type,
    loss_fn_outputs: result.loss_fn_outputs.map((outputs) => {
      const json: Record<string, TensorJson> = {};
      for (const [name, tensor] of Object.entries(outputs)) json[name] = tensorToJson(tensor);
      return json;
    }),
    metrics: result.metrics,
  };
}

export function optimStepResult(result: OptimStepResult) {
  return { metrics: result.metrics };
}

export function saveWeightsResult(path: string) {
  return { path, type: 'save_weights' as const };
}

/** Named: the checkpoint's path. Unnamed: the sampling session the server created (no path). */
export function saveWeightsForSamplerResult(
  target: { readonly path: string } | { readonly sampling_session_id: string },
) {
  return { ...target, type: 'save_weights_for_sampler' as const };
}

export function loadWeightsResult(path: string) {
  return { path, type: 'load_weights' as const };
}

export function unloadModelResult(modelId: string) {
  return { model_id: modelId, type: 'unload_model' as const };
}

/** `{type: "sample", sequences: [{stop_reason, tokens, logprobs}], prompt_logprobs?}`. */
export function sampleResult(run: SampleRun) {
  return toSampleResult(run);
}
