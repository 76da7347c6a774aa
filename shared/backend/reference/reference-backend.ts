/**
 * The reference CPU backend: the `Backend` interface over the small model in ./model.ts. Pure and
 * synchronous inside; the methods are async only to match the interface a GPU engine implements.
 */

import { InfrastructureError, StepUserError } from '../../base/errors.js';
import type {
  AdamParams,
  Backend,
  BackendState,
  CreateModelInput,
  ForwardBackwardInput,
  ForwardBackwardResult,
  OptimStepResult,
  PassItem,
  PassOutcome,
  SampleOptions,
  SampleRequest,
  SampleRun,
  SamplerModel,
  StepOutcome,
  WeightsKind,
} from '../backend.js';
import { BLOB_STATE, decodeBlob, encodeBlob } from './codec.js';
import { loadReferenceSampler, sampleReference } from './sampler.js';
import { asReferenceState } from './state.js';
import {
  createReferenceModel,
  exportReferenceWeights,
  importReferenceWeights,
  referenceOptimStep,
  runPass,
} from './training.js';

export class ReferenceBackend implements Backend {
  readonly name = 'reference';

  async createModel(input: CreateModelInput): Promise<BackendState> {
    return createReferenceModel(input);
  }

  async forward(state: BackendState, input: ForwardBackwardInput): Promise<ForwardBackwardResult> {
    return runPass(asReferenceState(state), input, false).result;
  }

  async forwardBackward(
    state: BackendState,
    input: ForwardBackwardInput,
  ): Promise<StepOutcome<ForwardBackwardResult>> {
    return runPass(asReferenceState(state), input, true);
  }

  /** Loops: the reference model gains nothing from fusing. User errors fail only their own item. */
  async runPasses(items: readonly PassItem[]): Promise<PassOutcome[]> {
    return items.map((item): PassOutcome => {
      try {
        const outcome = runPass(asReferenceState(item.state), item.input, item.type === 'forward_backward');
        return { ok: true, state: outcome.state, result: outcome.result };
      } catch (error) {
        if (error instanceof StepUserError) return { ok: false, error };
        throw error;
      }
    });
  }

  async optimStep(state: BackendState, params: AdamParams): Promise<StepOutcome<OptimStepResult>> {
    return referenceOptimStep(asReferenceState(state), params);
  }

  async exportWeights(state: BackendState, kind: WeightsKind): Promise<Uint8Array> {
    return exportReferenceWeights(asReferenceState(state), kind);
  }

  async importWeights(
    state: BackendState,
    bytes: Uint8Array,
    options: { optimizer: boolean },
  ): Promise<BackendState> {
    return importReferenceWeights(asReferenceState(state), bytes, options);
  }

  async loadSampler(baseModel: string, weights: Uint8Array | null): Promise<SamplerModel> {
    return loadReferenceSampler(baseModel, weights);
  }

  async sample(sampler: SamplerModel, request: SampleRequest, options?: SampleOptions): Promise<SampleRun> {
    return sampleReference(sampler, request, options);
  }

  async serializeState(state: BackendState): Promise<Uint8Array> {
    return encodeBlob(BLOB_STATE, asReferenceState(state));
  }

  async deserializeState(bytes: Uint8Array): Promise<BackendState> {
    const { type, state } = decodeBlob(bytes);
    if (type !== BLOB_STATE)
      throw new InfrastructureError('expected a model state blob, got a weights checkpoint');
    return state;
  }
}
